"""The fleet page's headline tiles: the last 7 days against the 7 before, GPUs' worth
lost, failures per 1,000 GPU-hours, the trend's net change."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any, ClassVar

from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    INTERVALS,
    DateRange,
    Interval,
    JobFilter,
    validated,
)
from ettweb.queries.day_totals import read_day_totals
from ettweb.queries.exposed import as_api, hidden
from ettweb.queries.lifecycle import LifecycleQuery
from ettweb.queries.lost import LostByComponentQuery
from ettweb.queries.registry import Query, runner_for
from ettweb.queries.trend import TrendQuery, trend_of


@dataclass(frozen=True)
class FleetHeadlineQuery(Query["FleetHeadlineResult"]):
    """The overview's tiles beyond the range's totals, of the jobs ``jobs`` keeps: the
    range's last 7 days against the 7 before, lost capacity in GPUs, failures per 1,000
    GPU-hours, and the trend's net change at ``interval``."""

    range: DateRange
    interval: Interval = "day"
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)


@dataclass(frozen=True)
class FleetHeadlineResult:
    """``week_*`` compare the range's last 7 days with the 7 before (None where either has
    no wall time, or the 7 before would start before the first day); ``gpus_lost`` is lost
    GPU-hours / hours in the range: how many GPUs' worth of capacity the range lost."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("week_from", "week_to")
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "week_from", "week_to", "week_ett_pct", "week_change_pts", "week_change_rel_pct",
        "lost_gpu_hours", "gpus_lost", "failures", "wall_gpu_hours",
        "failures_per_1k_gpu_hours", "trend_change_pts")

    #: The API names the week's days beside the range's (``date_from``/``date_to``), so
    #: under names of their own: ``week_from`` and ``week_to``.
    week: DateRange = field(metadata=hidden())
    week_ett_pct: float | None
    week_change_pts: float | None
    week_change_rel_pct: float | None
    lost_gpu_hours: float
    gpus_lost: float
    failures: int
    wall_gpu_hours: float
    failures_per_1k_gpu_hours: float | None
    trend_change_pts: float | None

    @property
    def week_from(self) -> date:
        """The first of the range's last 7 days (the ``week_*`` tiles' week)."""
        return self.week.date_from

    @property
    def week_to(self) -> date:
        """The last of the range's last 7 days: the range's last day."""
        return self.week.date_to

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(FleetHeadlineQuery)
class FleetHeadlineQueryRunner:
    """Composes the trend, lost-time and lifecycle runners, so a tile can never disagree
    with the chart beneath it."""

    def __init__(self, query: FleetHeadlineQuery) -> None:
        self.query = query

    def calculate(self) -> FleetHeadlineResult:
        from ettweb.queries import calculate  # the package's memo: the page asked these too

        q = self.query
        week = q.range.last_days(7)
        this_week = trend_of(read_day_totals(q.range, q.jobs).within(week), week, "day")
        earlier = week.days_before(7)
        before = (calculate(TrendQuery(earlier, jobs=q.jobs))
                  if earlier is not None else None)
        change = (this_week.ett_pct - before.ett_pct
                  if before is not None and before.wall_gpu_s and this_week.wall_gpu_s else None)
        trend = calculate(TrendQuery(q.range, q.interval, jobs=q.jobs))
        lost = calculate(LostByComponentQuery(q.range, q.jobs))
        failures = calculate(LifecycleQuery(q.range, q.interval, q.jobs))
        wall_hours = trend.wall_gpu_s / HOUR_S
        return FleetHeadlineResult(
            week=week, week_ett_pct=this_week.ett_pct if this_week.wall_gpu_s else None,
            week_change_pts=change,
            week_change_rel_pct=(100 * change / before.ett_pct
                                 if change is not None and before and before.ett_pct else None),
            lost_gpu_hours=lost.lost_gpu_hours, gpus_lost=lost.lost_gpu_hours / (q.range.days * 24),
            failures=failures.failures, wall_gpu_hours=wall_hours,
            failures_per_1k_gpu_hours=(1000 * failures.failures / wall_hours
                                       if wall_hours else None),
            trend_change_pts=trend.net_change_pts)
