"""Fleet-wide queries over the per-day and per-job rollups: trend, lost time, top jobs,
lifecycle sub-metrics and the jobs table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Final

from django.db.models import Count, DateField, F, FloatField, Func, Q, Sum
from django.db.models.functions import Cast

from collector.schema import FAILED_STATUSES
from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.queries.base import (
    ALL,
    ANY_JOB,
    GPU_BUCKETS,
    GROUPINGS,
    HOUR_S,
    INTERVALS,
    LABELS,
    DateRange,
    Grouping,
    Interval,
    JobFilter,
    aggregating,
    category_rows,
    label_rows,
    pct,
    period_of,
    phase_components,
    validated,
)
from ettweb.rollups.models import (
    AttemptRollup,
    JobDayRollup,
    JobRollup,
    RecoveryPartRollup,
    RecoveryRollup,
)

# --------------------------------------------------------------------------- day totals

@dataclass(frozen=True)
class DayTotalsQuery:
    """GPU-seconds per (UTC day, category) of the jobs ``jobs`` keeps over a range: the one
    read of the per-day sums that the ungrouped trend, the lost time by component, the lost
    time over time and the headline tiles are all folded from.

    Why one query under several: the overview asks all of them for the same days and
    filter; each used to be its own pass over the range's day rows. Inside one request
    (``ettweb.queries.memoized``) this runs once and the folds cost microseconds. A grouped
    trend reads its own sums (:func:`_group_sums`): it needs no category.
    """

    range: DateRange
    jobs: JobFilter = ANY_JOB


@dataclass(frozen=True)
class DayTotalsResult:
    """``cells[(day, group, category)]`` = GPU-seconds; ``group`` is always ``ALL`` (the
    key has the trend's shape, so one fold serves grouped and ungrouped sums)."""

    cells: dict[tuple[date, str, str], float]

    def within(self, days: DateRange) -> DayTotalsResult:
        """The cells of the days inside ``days`` (a sub-range of this one's)."""
        return DayTotalsResult({key: value for key, value in self.cells.items()
                                if days.date_from <= key[0] <= days.date_to})


class DayTotalsQueryRunner:
    def __init__(self, query: DayTotalsQuery) -> None:
        self.query = query

    def calculate(self) -> DayTotalsResult:
        q = self.query
        # Summed as float8: the stored sums are exact numerics, but adding them for a chart
        # needs no exactness and numeric addition costs 2-3x. Read as tuples: the ORM's row
        # dicts cost more than the read.
        with aggregating():
            rows = list(category_rows(q.range, q.jobs).values_list("day", "category")
                        .annotate(gpu_s=Sum(Cast("gpu_seconds", FloatField()))).order_by())
        cells: dict[tuple[date, str, str], float] = defaultdict(float)
        for day, category, gpu_s in rows:
            cells[(day, ALL, category)] += gpu_s or 0.0
        return DayTotalsResult(dict(cells))


def _day_totals(days: DateRange, jobs: JobFilter) -> DayTotalsResult:
    from ettweb.queries import calculate  # the package's memo: shared by the page's queries

    return calculate(DayTotalsQuery(days, jobs))


# --------------------------------------------------------------------------- ETT% trend

@dataclass(frozen=True)
class TrendQuery:
    """Fleet or group ETT% (GPU-weighted) per day or week over a range, of the jobs
    ``jobs`` keeps."""

    range: DateRange
    interval: Interval = "day"
    group_by: Grouping = "none"
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)
        validated("group_by", self.group_by, GROUPINGS)

    def previous(self) -> TrendQuery | None:
        """The same trend over the period just before (as many days, same grouping and
        filter): the overlay a page draws to compare with. None before the first day."""
        earlier = self.range.previous()
        return None if earlier is None else TrendQuery(earlier, self.interval, self.group_by,
                                                       self.jobs)


@dataclass(frozen=True)
class TrendPoint:
    """One group's GPU-seconds in one period; ``ett_pct`` = productive / wall."""

    period: date
    group: str
    wall_gpu_s: float
    productive_gpu_s: float

    @property
    def ett_pct(self) -> float:
        return pct(self.productive_gpu_s, self.wall_gpu_s)


@dataclass(frozen=True)
class TrendResult:
    """Points sorted by (group, period), and the whole range's totals."""

    points: list[TrendPoint]
    groups: list[str]
    wall_gpu_s: float
    productive_gpu_s: float

    @property
    def ett_pct(self) -> float:
        return pct(self.productive_gpu_s, self.wall_gpu_s)

    def series(self, group: str) -> list[TrendPoint]:
        return [point for point in self.points if point.group == group]

    def folded(self, keep: int) -> dict[str, list[TrendPoint]]:
        """Each group's points, the ``keep`` largest (by wall GPU-seconds) by name and the
        rest summed into one ``other (N groups)`` series per period: nine overlapping lines
        read as none. Groups keep their order (GPU-size buckets by size)."""
        if len(self.groups) <= keep + 1:
            return {group: self.series(group) for group in self.groups}
        wall: dict[str, float] = defaultdict(float)
        for point in self.points:
            wall[point.group] += point.wall_gpu_s
        largest = set(sorted(self.groups, key=lambda g: (-wall[g], g))[:keep])
        other: dict[date, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for point in self.points:
            if point.group not in largest:
                other[point.period][0] += point.wall_gpu_s
                other[point.period][1] += point.productive_gpu_s
        name = f"other ({len(self.groups) - keep} groups)"
        series = {group: self.series(group) for group in self.groups if group in largest}
        series[name] = [TrendPoint(period, name, wall_s, productive)
                        for period, (wall_s, productive) in sorted(other.items())]
        return series

    @property
    def net_change_pts(self) -> float | None:
        """The whole (filtered) fleet's ETT% in the range's last period with data minus its
        first, in points; None with fewer than two such periods. What a chart is headed by."""
        totals: dict[date, list[float]] = {}
        for point in self.points:
            wall_productive = totals.setdefault(point.period, [0.0, 0.0])
            wall_productive[0] += point.wall_gpu_s
            wall_productive[1] += point.productive_gpu_s
        with_data = [v for _, v in sorted(totals.items()) if v[0] > 0]
        if len(with_data) < 2:
            return None
        first, last = with_data[0], with_data[-1]
        return 100 * last[1] / last[0] - 100 * first[1] / first[0]

    def as_api(self) -> dict[str, Any]:
        return {"groups": self.groups, "wall_gpu_s": self.wall_gpu_s,
                "productive_gpu_s": self.productive_gpu_s, "ett_pct": self.ett_pct,
                "net_change_pts": self.net_change_pts,
                "points": [{"period": p.period.isoformat(), "group": p.group,
                            "wall_gpu_s": p.wall_gpu_s, "productive_gpu_s": p.productive_gpu_s,
                            "ett_pct": p.ett_pct} for p in self.points]}


#: The label-sum field each grouping reads (``gpus`` holds the bucket label already).
_GROUP_FIELDS: Final[dict[str, str]] = {"model": "model", "team": "team", "cluster": "cluster",
                                        "gpus": "gpus"}


def _group_label(group_by: Grouping, value: Any) -> str:
    if group_by == "none":
        return ALL
    return str(value) if value else "(none)"


class TrendQueryRunner:
    def __init__(self, query: TrendQuery) -> None:
        self.query = query

    def calculate(self) -> TrendResult:
        q = self.query
        if q.group_by == "none":
            return trend_of(_day_totals(q.range, q.jobs), q.range, q.interval)
        return _trend_of_sums(_group_sums(q), q.range, q.interval, q.group_by)


def _group_sums(q: TrendQuery) -> dict[tuple[date, str], list[float]]:
    """(day, group) -> [wall, productive] GPU-s from the label sums, categories summed in
    Postgres: a grouped trend needs no category, and the bench's 180-day fleet grouped by
    model gives 1,440 rows where keeping categories returned 24,422 to fold in Python."""
    gpu_s = Cast("gpu_seconds", FloatField())
    with aggregating():
        rows = list(label_rows(q.range, q.jobs).values_list("day", _GROUP_FIELDS[q.group_by])
                    .annotate(wall=Sum(gpu_s),
                              productive=Sum(gpu_s, filter=Q(category=PRODUCTIVE)))
                    .order_by())
    sums: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for day, value, wall, productive in rows:
        cell = sums[(day, _group_label(q.group_by, value))]
        cell[0] += wall or 0.0
        cell[1] += productive or 0.0
    return sums


def trend_of(totals: DayTotalsResult, days: DateRange, interval: Interval) -> TrendResult:
    """The trend folded from day totals: per period (day, or the Monday of its ISO week) and
    group, wall and productive GPU-seconds."""
    sums: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (day, group, category), gpu_s in totals.cells.items():
        cell = sums[(day, group)]
        cell[0] += gpu_s
        if category == PRODUCTIVE:
            cell[1] += gpu_s
    return _trend_of_sums(sums, days, interval)


#: GPU-size buckets in the order of their sizes ("1", "2-8", … "513+"), not as text sorts.
_BUCKET_ORDER: Final = {label: index for index, (_, _, label) in enumerate(GPU_BUCKETS)}


def group_order(group: str, group_by: str = "none") -> tuple[int, str]:
    """How groups are listed (legends, the API's points): GPU-size buckets by size, every
    other grouping by name."""
    if group_by == "gpus":
        return _BUCKET_ORDER.get(group, len(_BUCKET_ORDER)), group
    return 0, group


def _trend_of_sums(sums: Mapping[tuple[date, str], list[float]], days: DateRange,
                   interval: Interval, group_by: str = "none") -> TrendResult:
    """The trend from (day, group) -> [wall, productive] GPU-s, folded into periods."""
    folded: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (day, group), (wall, productive) in sums.items():
        bucket = folded[(days.period_of(day, interval), group)]
        bucket[0] += wall
        bucket[1] += productive
    points = [TrendPoint(period, group, wall, productive)
              for (period, group), (wall, productive) in folded.items()]
    points.sort(key=lambda p: (group_order(p.group, group_by), p.period))
    return TrendResult(points=points,
                       groups=sorted({p.group for p in points},
                                     key=lambda g: group_order(g, group_by)),
                       wall_gpu_s=sum(p.wall_gpu_s for p in points),
                       productive_gpu_s=sum(p.productive_gpu_s for p in points))


# --------------------------------------------------------------------------- lost by component

@dataclass(frozen=True)
class LostByComponentQuery:
    """Lost GPU-seconds per owning component over a range (map read at query time)."""

    range: DateRange
    jobs: JobFilter = ANY_JOB


@dataclass(frozen=True)
class ComponentLoss:
    component: str
    gpu_s: float
    categories: dict[str, float]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_s / HOUR_S


@dataclass(frozen=True)
class LostByComponentResult:
    """Components, largest loss first."""

    components: list[ComponentLoss]

    @property
    def lost_gpu_hours(self) -> float:
        return sum(c.gpu_s for c in self.components) / HOUR_S

    def as_api(self) -> dict[str, Any]:
        return {"lost_gpu_s": sum(c.gpu_s for c in self.components),
                "components": [{"component": c.component, "gpu_s": c.gpu_s,
                                "categories": c.categories} for c in self.components]}


class LostByComponentQueryRunner:
    def __init__(self, query: LostByComponentQuery) -> None:
        self.query = query

    def calculate(self) -> LostByComponentResult:
        return lost_by_component_of(_day_totals(self.query.range, self.query.jobs),
                                    phase_components())


def lost_by_component_of(totals: DayTotalsResult,
                         mapping: Mapping[str, str]) -> LostByComponentResult:
    """Lost GPU-seconds per owning component (and its categories) folded from day totals."""
    by_category: dict[str, float] = defaultdict(float)
    for (_, _, category), gpu_s in totals.cells.items():
        if category != PRODUCTIVE:
            by_category[category] += gpu_s
    grouped: dict[str, dict[str, float]] = defaultdict(dict)
    for category, gpu_s in sorted(by_category.items()):
        grouped[component_of(category, mapping)][category] = gpu_s
    components = [ComponentLoss(name, sum(cats.values()), cats)
                  for name, cats in grouped.items()]
    components.sort(key=lambda c: (-c.gpu_s, c.component))
    return LostByComponentResult(components)


@dataclass(frozen=True)
class LostTrendQuery:
    """Lost GPU-seconds per owning component per day or week: the stacked chart of where the
    fleet's time went over the range."""

    range: DateRange
    interval: Interval = "day"
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)


@dataclass(frozen=True)
class LostTrendResult:
    periods: list[date]
    components: list[str]  # the largest loser first
    gpu_s: dict[str, list[float]]  # component -> one value per period

    def as_api(self) -> dict[str, Any]:
        return {"periods": [p.isoformat() for p in self.periods],
                "components": self.components, "gpu_s": self.gpu_s}


class LostTrendQueryRunner:
    def __init__(self, query: LostTrendQuery) -> None:
        self.query = query

    def calculate(self) -> LostTrendResult:
        mapping = phase_components()
        q = self.query
        cells: dict[tuple[date, str], float] = defaultdict(float)
        for (day, _, category), gpu_s in _day_totals(q.range, q.jobs).cells.items():
            if category != PRODUCTIVE:
                cells[(q.range.period_of(day, q.interval), component_of(category, mapping))] += (
                    gpu_s)
        days = sorted({period for period, _ in cells})
        totals: dict[str, float] = defaultdict(float)
        for (_, component), value in cells.items():
            totals[component] += value
        names = sorted((c for c, v in totals.items() if v), key=lambda c: (-totals[c], c))
        return LostTrendResult(days, names, {c: [cells.get((d, c), 0.0) for d in days]
                                             for c in names})


# --------------------------------------------------------------------------- top jobs

@dataclass(frozen=True)
class TopJobsQuery:
    """Jobs that lost the most GPU-hours inside the range."""

    range: DateRange
    limit: int = 10
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= 1000:
            raise ValueError(f"limit must be between 1 and 1000, not {self.limit}")


@dataclass(frozen=True)
class TopJob:
    job: str
    lost_gpu_s: float
    wall_gpu_s: float
    gpus: int
    status: str
    model: str
    team: str
    cluster: str

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def ett_pct(self) -> float:
        """ETT% of the job inside the range (not over its whole life)."""
        return pct(self.wall_gpu_s - self.lost_gpu_s, self.wall_gpu_s)


@dataclass(frozen=True)
class TopJobsResult:
    jobs: list[TopJob]

    def as_api(self) -> dict[str, Any]:
        return {"jobs": [{"job": j.job, "lost_gpu_s": j.lost_gpu_s, "wall_gpu_s": j.wall_gpu_s,
                          "ett_pct": j.ett_pct, "gpus": j.gpus, "status": j.status,
                          "model": j.model, "team": j.team, "cluster": j.cluster}
                         for j in self.jobs]}


class TopJobsQueryRunner:
    def __init__(self, query: TopJobsQuery) -> None:
        self.query = query

    def calculate(self) -> TopJobsResult:
        q = self.query
        job_days = q.jobs.narrow(JobDayRollup.objects.filter(day__gte=q.range.date_from,
                                                             day__lte=q.range.date_to))
        with aggregating():
            rows = list(job_days.values("job_id")
                        .annotate(wall=Sum("wall_gpu_seconds"),
                                  productive=Sum("productive_gpu_seconds"))
                        .annotate(lost=F("wall") - F("productive"))
                        .filter(lost__gt=0).order_by("-lost", "job_id")[:q.limit])
        meta = {r.job: r for r in JobRollup.objects.filter(job__in=[x["job_id"] for x in rows])}
        jobs = [TopJob(job=row["job_id"], lost_gpu_s=row["lost"], wall_gpu_s=row["wall"],
                       gpus=meta[row["job_id"]].gpus, status=meta[row["job_id"]].status,
                       model=meta[row["job_id"]].model, team=meta[row["job_id"]].team,
                       cluster=meta[row["job_id"]].cluster)
                for row in rows]
        return TopJobsResult(jobs)


# --------------------------------------------------------------------------- lifecycle

@dataclass(frozen=True)
class LifecycleQuery:
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
    """One period's sub-metrics (ETT_SPEC §3.7) across the fleet: counts and sums, so the
    means of any periods folded together stay exact."""

    period: date
    jobs_started: int = 0
    start_s_total: float = 0.0
    recoveries: int = 0
    recover_s_total: float = 0.0
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
        return {"failures": self.failures, "recoveries": self.recoveries,
                "restart_tax_gpu_s": self.restart_tax_gpu_s, "categories": self.categories,
                "points": [{"period": p.period.isoformat(), "jobs_started": p.jobs_started,
                            "mean_time_to_start_s": p.mean_time_to_start_s,
                            "recoveries": p.recoveries,
                            "mean_time_to_recover_s": p.mean_time_to_recover_s,
                            "failures": p.failures, "restart_tax_gpu_s": p.restart_tax_gpu_s}
                           for p in self.points]}


class _EpochDay(Func):
    """The UTC day of an epoch-seconds column, in SQL (so rows are grouped by Postgres)."""

    template = "((to_timestamp(%(expressions)s) AT TIME ZONE 'UTC')::date)"
    output_field = DateField()


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


# --------------------------------------------------------------------------- filter values

@dataclass(frozen=True)
class FilterChoicesQuery:
    """The values the model, team and cluster filters can take: every label a job has."""


@dataclass(frozen=True)
class FilterChoicesResult:
    model: tuple[str, ...]
    team: tuple[str, ...]
    cluster: tuple[str, ...]


class FilterChoicesQueryRunner:
    """Distinct labels of the per-job rollups (a fleet has tens of each, not thousands)."""

    def __init__(self, query: FilterChoicesQuery) -> None:
        self.query = query

    def calculate(self) -> FilterChoicesResult:
        # One pass over the job rollups for every label at once (their combinations are
        # few), rather than one DISTINCT sort per label.
        combos = list(JobRollup.objects.values_list(*LABELS).distinct().order_by())
        values = {name: tuple(sorted({combo[i] for combo in combos if combo[i]}))
                  for i, name in enumerate(LABELS)}
        return FilterChoicesResult(**values)


# --------------------------------------------------------------------------- headline tiles

@dataclass(frozen=True)
class FleetHeadlineQuery:
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

    week: DateRange
    week_ett_pct: float | None
    week_change_pts: float | None
    week_change_rel_pct: float | None
    lost_gpu_hours: float
    gpus_lost: float
    failures: int
    wall_gpu_hours: float
    failures_per_1k_gpu_hours: float | None
    trend_change_pts: float | None

    def as_api(self) -> dict[str, Any]:
        return {"week_from": self.week.date_from.isoformat(),
                "week_to": self.week.date_to.isoformat(), "week_ett_pct": self.week_ett_pct,
                "week_change_pts": self.week_change_pts,
                "week_change_rel_pct": self.week_change_rel_pct,
                "lost_gpu_hours": self.lost_gpu_hours, "gpus_lost": self.gpus_lost,
                "failures": self.failures, "wall_gpu_hours": self.wall_gpu_hours,
                "failures_per_1k_gpu_hours": self.failures_per_1k_gpu_hours,
                "trend_change_pts": self.trend_change_pts}


class FleetHeadlineQueryRunner:
    """Composes the trend, lost-time and lifecycle runners, so a tile can never disagree
    with the chart beneath it."""

    def __init__(self, query: FleetHeadlineQuery) -> None:
        self.query = query

    def calculate(self) -> FleetHeadlineResult:
        from ettweb.queries import calculate  # the package's memo: the page asked these too

        q = self.query
        week = q.range.last_days(7)
        this_week = trend_of(_day_totals(q.range, q.jobs).within(week), week, "day")
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
