"""The ETT% trend per day or week, whole fleet or per group (model, team, cluster, GPU size)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, ClassVar, Final

from django.db.models import FloatField, Q, Sum
from django.db.models.functions import Cast

from ettweb.attribution.components import PRODUCTIVE
from ettweb.queries.base import (
    ALL,
    ANY_JOB,
    GPU_BUCKETS,
    GROUPINGS,
    INTERVALS,
    DateRange,
    Grouping,
    Interval,
    JobFilter,
    aggregating,
    label_rows,
    pct,
    validated,
)
from ettweb.queries.day_totals import DayTotalsResult, read_day_totals
from ettweb.queries.exposed import as_api
from ettweb.queries.registry import Query, runner_for


@dataclass(frozen=True)
class TrendQuery(Query["TrendResult"]):
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

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("ett_pct",)

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

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("ett_pct", "net_change_pts")
    API_ORDER: ClassVar[tuple[str, ...]] = ("groups", "wall_gpu_s", "productive_gpu_s",
                                            *API_PROPERTIES, "points")

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
        return as_api(self)


#: The label-sum field each grouping reads (``gpus`` holds the bucket label already).
_GROUP_FIELDS: Final[dict[str, str]] = {"model": "model", "team": "team", "cluster": "cluster",
                                        "gpus": "gpus"}


def _group_label(group_by: Grouping, value: Any) -> str:
    if group_by == "none":
        return ALL
    return str(value) if value else "(none)"


@runner_for(TrendQuery)
class TrendQueryRunner:
    def __init__(self, query: TrendQuery) -> None:
        self.query = query

    def calculate(self) -> TrendResult:
        q = self.query
        if q.group_by == "none":
            return trend_of(read_day_totals(q.range, q.jobs), q.range, q.interval)
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
