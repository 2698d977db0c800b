"""Lost GPU-seconds per owning component: over a range, and per day or week."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, ClassVar

from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    INTERVALS,
    DateRange,
    Interval,
    JobFilter,
    phase_components,
    validated,
)
from ettweb.queries.day_totals import DayTotalsResult, read_day_totals
from ettweb.queries.exposed import as_api, doc
from ettweb.queries.registry import Query, runner_for


@dataclass(frozen=True)
class LostByComponentQuery(Query["LostByComponentResult"]):
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

    API_PROPERTIES: ClassVar = ("lost_gpu_s",)
    API_ORDER: ClassVar = ("lost_gpu_s", "components")

    components: list[ComponentLoss]

    @property
    def lost_gpu_s(self) -> float:
        """GPU-seconds lost to every component together."""
        return sum(c.gpu_s for c in self.components)

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(LostByComponentQuery)
class LostByComponentQueryRunner:
    def __init__(self, query: LostByComponentQuery) -> None:
        self.query = query

    def calculate(self) -> LostByComponentResult:
        return lost_by_component_of(read_day_totals(self.query.range, self.query.jobs),
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
class LostTrendQuery(Query["LostTrendResult"]):
    """Lost GPU-seconds per owning component per day or week: the stacked chart of where the
    fleet's time went over the range."""

    range: DateRange
    interval: Interval = "day"
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)


@dataclass(frozen=True)
class LostTrendResult:
    """Lost GPU-seconds per component per period: the stacked chart's series."""

    periods: list[date]
    components: list[str] = field(metadata=doc("the largest loser first"))
    gpu_s: dict[str, list[float]] = field(metadata=doc("component → one value per period"))

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(LostTrendQuery)
class LostTrendQueryRunner:
    def __init__(self, query: LostTrendQuery) -> None:
        self.query = query

    def calculate(self) -> LostTrendResult:
        mapping = phase_components()
        q = self.query
        cells: dict[tuple[date, str], float] = defaultdict(float)
        for (day, _, category), gpu_s in read_day_totals(q.range, q.jobs).cells.items():
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
