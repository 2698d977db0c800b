"""Lifecycle sub-metrics per day or week: time to start, time to recover, failures and
the restart tax."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from typing import Any, ClassVar

from django.db.models import Count, DateField, F, Func, Sum

from collector.schema import FAILED_STATUSES
from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    INTERVALS,
    DateRange,
    Interval,
    JobFilter,
    aggregating,
    period_of,
    validated,
)
from ettweb.queries.exposed import as_api, hidden
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.models import (
    AttemptRollup,
    JobRollup,
    RecoveryPartRollup,
    RecoveryRollup,
)


@dataclass(frozen=True)
class LifecycleQuery(Query["LifecycleResult"]):
    """Time to start, time to recover (with its parts), failures per fleet day or week.

    A job's time to start counts on the day its first attempt started; a recovery and a
    failure count on the day the failed attempt's last event (resp. its end) falls.
    """

    range: DateRange
    interval: Interval = "day"
    jobs: JobFilter = ANY_JOB
    #: False skips the restart tax per category (the weekly numbers and the summary do not
    #: show it, and summing every recovery's parts is most of this query's cost).
    with_restart_tax: bool = True

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)


@dataclass
class LifecyclePoint:
    """One period's sub-metrics (ETT_SPEC §3.8) across the fleet: counts and sums, so the
    means of any periods folded together stay exact."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("mean_time_to_start_s", "mean_time_to_recover_s")

    period: date
    jobs_started: int = 0
    start_s_total: float = field(default=0.0, metadata=hidden())
    recoveries: int = 0
    recover_s_total: float = field(default=0.0, metadata=hidden())
    failures: int = 0
    restart_tax_gpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def mean_time_to_start_s(self) -> float | None:
        return self.start_s_total / self.jobs_started if self.jobs_started else None

    @property
    def mean_time_to_recover_s(self) -> float | None:
        return self.recover_s_total / self.recoveries if self.recoveries else None

    @property
    def restart_tax_gpu_hours(self) -> float:
        return sum(self.restart_tax_gpu_s.values()) / HOUR_S


@dataclass(frozen=True)
class LifecycleResult:
    """Per period the lifecycle numbers, and the whole range's failures, recoveries and
    restart tax by category (the sums the API answers beside the periods)."""

    API_PROPERTIES: ClassVar = ("failures", "recoveries", "restart_tax_gpu_s")
    API_ORDER: ClassVar = ("failures", "recoveries", "restart_tax_gpu_s", "categories",
                           "points")

    points: list[LifecyclePoint]
    categories: list[str]

    @property
    def failures(self) -> int:
        return sum(p.failures for p in self.points)

    @property
    def recoveries(self) -> int:
        return sum(p.recoveries for p in self.points)

    @property
    def jobs_started(self) -> int:
        return sum(p.jobs_started for p in self.points)

    @property
    def mean_time_to_start_s(self) -> float | None:
        started = self.jobs_started
        return sum(p.start_s_total for p in self.points) / started if started else None

    @property
    def mean_time_to_recover_s(self) -> float | None:
        count = self.recoveries
        return sum(p.recover_s_total for p in self.points) / count if count else None

    @property
    def restart_tax_gpu_s(self) -> dict[str, float]:
        total: dict[str, float] = defaultdict(float)
        for point in self.points:
            for category, value in point.restart_tax_gpu_s.items():
                total[category] += value
        return dict(total)

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


class _EpochDay(Func):
    """The UTC day of an epoch-seconds column, in SQL (so rows are grouped by Postgres)."""

    template = "((to_timestamp(%(expressions)s) AT TIME ZONE 'UTC')::date)"
    output_field = DateField()


@runner_for(LifecycleQuery)
class LifecycleQueryRunner:
    """Sums per period in Postgres: a 180-day fleet holds tens of thousands of attempts and
    recoveries, and reading them row by row (each recovery's JSON parts decoded in Python)
    cost most of the overview's time at fleet scale."""

    def __init__(self, query: LifecycleQuery) -> None:
        self.query = query
        self.points: dict[date, LifecyclePoint] = {}

    def _point(self, period: date) -> LifecyclePoint:
        return self.points.setdefault(period, LifecyclePoint(period))

    def calculate(self) -> LifecycleResult:
        q = self.query
        low, high = q.range.epoch_bounds
        started = q.jobs.narrow(JobRollup.objects.filter(
            window_start__gte=low, window_start__lt=high, time_to_start_s__isnull=False), "")
        for row in (started.annotate(period=period_of(_EpochDay("window_start"), q.interval))
                    .values("period").annotate(n=Count("id"), s=Sum("time_to_start_s"))
                    .order_by()):
            point = self._point(row["period"])
            point.jobs_started, point.start_s_total = row["n"], row["s"] or 0.0
        failed = q.jobs.narrow(AttemptRollup.objects.filter(end__gte=low, end__lt=high,
                                                            status__in=FAILED_STATUSES))
        for row in (failed.annotate(period=period_of(_EpochDay("end"), q.interval))
                    .values("period").annotate(n=Count("id")).order_by()):
            self._point(row["period"]).failures = row["n"]
        recovered = q.jobs.narrow(RecoveryRollup.objects.filter(day__gte=q.range.date_from,
                                                                day__lte=q.range.date_to))
        for row in (recovered.annotate(period=period_of(F("day"), q.interval)).values("period")
                    .annotate(n=Count("id"), s=Sum("seconds")).order_by()):
            point = self._point(row["period"])
            point.recoveries, point.recover_s_total = row["n"], row["s"] or 0.0
        for period, category, gpu_s in _restart_tax(q) if q.with_restart_tax else []:
            self._point(period).restart_tax_gpu_s[category] = gpu_s
        points = sorted(self.points.values(), key=lambda p: p.period)
        categories = sorted({c for p in points for c in p.restart_tax_gpu_s})
        return LifecycleResult(points, categories)


def _restart_tax(q: LifecycleQuery) -> list[tuple[date, str, float]]:
    """GPU-seconds per (period, category) of the recoveries' parts inside the range, of the
    jobs ``q.jobs`` keeps (``RecoveryPartRollup``: one narrow row per recovery and
    category, where each recovery's JSON parts had to be parsed)."""
    parts = q.jobs.narrow(RecoveryPartRollup.objects.filter(day__gte=q.range.date_from,
                                                            day__lte=q.range.date_to))
    with aggregating():
        rows = list(parts.annotate(period=period_of(F("day"), q.interval))
                    .values_list("period", "category").annotate(gpu_s=Sum("gpu_seconds"))
                    .order_by())
    return [(period, category, float(gpu_s)) for period, category, gpu_s in rows]
