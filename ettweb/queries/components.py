"""One owning component's lost time, and every component side by side.

A component owner asks three things: how much accelerator time does my component cost the
fleet (GPU-hours, and points of the fleet's wall time so a growing fleet does not look
worse), where does it cost it (which jobs and models), and did my rollouts help. The
numbers come from the per-day rollups, categories mapped to components at query time with
the editable map, exactly like the fleet queries, so the component page and /fleet/ agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Final

from django.db.models import Count, Q, Sum

from ettweb.attribution.components import PRODUCTIVE, UNKNOWN_COMPONENT, component_of
from ettweb.components.logic import known_components
from ettweb.components.models import Component
from ettweb.queries.base import (
    HOUR_S,
    INTERVALS,
    DateRange,
    Interval,
    as_date,
    day_rows,
    pct,
    periods,
    phase_components,
    validated,
)
from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner, ImpactResult
from ettweb.queries.markers import (
    RolloutMarker,
    RolloutMarkersQuery,
    RolloutMarkersQueryRunner,
)
from ettweb.rollouts.models import Rollout
from ettweb.rollups.models import JobRollup

#: Rollouts whose impact a component page measures (newest first): each is a bootstrap.
MAX_IMPACT_ROWS: Final = 20
#: Label of jobs that never said which model they train.
NO_MODEL: Final = "(none)"


def component_names() -> list[str]:
    """Every component that can own lost time: the known ones, and ``unknown``, where an
    unmapped category lands even when the map itself never names it."""
    return sorted({*known_components(), UNKNOWN_COMPONENT})


def owned_categories(name: str, categories: Iterable[str], mapping: Mapping[str, str]) -> set[str]:
    """The categories among ``categories`` and the map's own that ``name`` owns."""
    candidates = {*categories, *mapping} - {PRODUCTIVE}
    return {c for c in candidates if component_of(c, mapping) == name}


# --------------------------------------------------------------------------- one component

@dataclass(frozen=True)
class ComponentQuery:
    """One component's lost time per day or week over ``range``, its top jobs and models,
    and its rollouts in the range with their measured impact."""

    name: str
    range: DateRange
    interval: Interval = "day"
    top: int = 10

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)
        if not 1 <= self.top <= 100:
            raise ValueError(f"top must be between 1 and 100, not {self.top}")


@dataclass(frozen=True)
class ComponentPoint:
    """One period: the component's lost GPU-s and the whole fleet's wall GPU-s."""

    period: date
    lost_gpu_s: float
    wall_gpu_s: float

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def lost_share_pts(self) -> float:
        """Points of the fleet's wall time this period (ETT_SPEC §6's lost share)."""
        return pct(self.lost_gpu_s, self.wall_gpu_s)


@dataclass(frozen=True)
class ComponentJob:
    """A job this component cost time; ``wall_gpu_s`` is the job's own inside the range."""

    job: str
    lost_gpu_s: float
    wall_gpu_s: float
    gpus: int
    model: str
    team: str

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def lost_share_pts(self) -> float:
        return pct(self.lost_gpu_s, self.wall_gpu_s)


@dataclass(frozen=True)
class ComponentModel:
    model: str
    lost_gpu_s: float
    jobs: int

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S


@dataclass(frozen=True)
class ComponentRollout:
    """A rollout of the component and its impact (None: not measured on this page)."""

    marker: RolloutMarker
    impact: ImpactResult | None


@dataclass(frozen=True)
class ComponentResult:
    """Everything the component page shows; fleet totals are over the same range."""

    name: str
    owner_team: str
    categories: dict[str, float]
    points: list[ComponentPoint]
    lost_gpu_s: float
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float
    top_jobs: list[ComponentJob]
    top_models: list[ComponentModel]
    markers: list[RolloutMarker] = field(default_factory=list)
    rollouts: list[ComponentRollout] = field(default_factory=list)

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def lost_share_pts(self) -> float:
        return pct(self.lost_gpu_s, self.fleet_wall_gpu_s)

    @property
    def share_of_fleet_lost_pct(self) -> float:
        return pct(self.lost_gpu_s, self.fleet_lost_gpu_s)

    @property
    def unmeasured_rollouts(self) -> int:
        """Rollouts in the range beyond the measured ones (the rollouts page lists them)."""
        return len(self.markers) - len(self.rollouts)


class ComponentQueryRunner:
    """Runs a :class:`ComponentQuery`; ``calculate()`` is None for an unknown component."""

    def __init__(self, query: ComponentQuery) -> None:
        self.query = query

    def calculate(self) -> ComponentResult | None:
        q = self.query
        if q.name not in component_names():
            return None
        mapping = phase_components()
        by_period = _period_category_sums(q.range, q.interval)
        categories = owned_categories(q.name, {c for _, c in by_period}, mapping)
        points = _points(by_period, categories)
        markers = _markers(q.range, q.name)
        return ComponentResult(
            name=q.name, owner_team=owner_teams().get(q.name, ""),
            categories={c: sum(v for (_, cat), v in by_period.items() if cat == c)
                        for c in sorted(categories)},
            points=points, lost_gpu_s=sum(p.lost_gpu_s for p in points),
            fleet_wall_gpu_s=sum(by_period.values()),
            fleet_lost_gpu_s=sum(v for (_, c), v in by_period.items() if c != PRODUCTIVE),
            top_jobs=_top_jobs(q.range, categories, q.top),
            top_models=_top_models(q.range, categories, q.top),
            markers=markers, rollouts=_measured(markers),
        )


def owner_teams() -> dict[str, str]:
    return dict(Component.objects.values_list("name", "owner_team"))


def _markers(query_range: DateRange, component: str) -> list[RolloutMarker]:
    return RolloutMarkersQueryRunner(RolloutMarkersQuery(query_range, component)).calculate() \
        .markers


def _period_category_sums(query_range: DateRange,
                          interval: Interval) -> dict[tuple[date, str], float]:
    """The fleet's GPU-s per (period, category), productive included: one grouped read."""
    rows = (periods(day_rows(query_range), interval).values("period", "category")
            .annotate(gpu_s=Sum("gpu_seconds")))
    sums: dict[tuple[date, str], float] = defaultdict(float)
    for row in rows:
        sums[(as_date(row["period"]), row["category"])] += row["gpu_s"] or 0.0
    return dict(sums)


def _points(by_period: Mapping[tuple[date, str], float],
            categories: set[str]) -> list[ComponentPoint]:
    """Every period holding fleet data, the component's loss zero where it lost nothing."""
    wall: dict[date, float] = defaultdict(float)
    lost: dict[date, float] = defaultdict(float)
    for (period, category), gpu_s in by_period.items():
        wall[period] += gpu_s
        if category in categories:
            lost[period] += gpu_s
    return [ComponentPoint(p, lost[p], wall[p]) for p in sorted(wall)]


def _top_jobs(query_range: DateRange, categories: set[str], top: int) -> list[ComponentJob]:
    if not categories:
        return []
    rows = list(day_rows(query_range).values("job_id")
                .annotate(lost=Sum("gpu_seconds", filter=Q(category__in=categories)))
                .filter(lost__gt=0).order_by("-lost", "job_id")[:top])
    ids = [row["job_id"] for row in rows]
    walls = dict(day_rows(query_range).filter(job_id__in=ids).values("job_id")
                 .annotate(wall=Sum("gpu_seconds")).values_list("job_id", "wall"))
    meta = {r.job: r for r in JobRollup.objects.filter(job__in=ids)}
    return [ComponentJob(job=row["job_id"], lost_gpu_s=row["lost"],
                         wall_gpu_s=walls.get(row["job_id"]) or 0.0,
                         gpus=meta[row["job_id"]].gpus, model=meta[row["job_id"]].model,
                         team=meta[row["job_id"]].team)
            for row in rows]


def _top_models(query_range: DateRange, categories: set[str], top: int) -> list[ComponentModel]:
    if not categories:
        return []
    rows = (day_rows(query_range).filter(category__in=categories).values("job__model")
            .annotate(lost=Sum("gpu_seconds"), jobs=Count("job_id", distinct=True))
            .filter(lost__gt=0).order_by("-lost", "job__model")[:top])
    return [ComponentModel(row["job__model"] or NO_MODEL, row["lost"], row["jobs"])
            for row in rows]


def _measured(markers: list[RolloutMarker]) -> list[ComponentRollout]:
    """The newest rollouts with their impact (the lead's §6 query, default window)."""
    newest = sorted(markers, key=lambda m: (m.at, m.id), reverse=True)[:MAX_IMPACT_ROWS]
    return [ComponentRollout(m, ImpactQueryRunner(ImpactQuery(m.id)).calculate())
            for m in newest]


# --------------------------------------------------------------------------- every component

@dataclass(frozen=True)
class ComponentsIndexQuery:
    """Every component with its lost time over ``range``."""

    range: DateRange


@dataclass(frozen=True)
class ComponentRow:
    name: str
    owner_team: str
    lost_gpu_s: float
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float
    rollouts: int

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def lost_share_pts(self) -> float:
        return pct(self.lost_gpu_s, self.fleet_wall_gpu_s)

    @property
    def share_of_fleet_lost_pct(self) -> float:
        return pct(self.lost_gpu_s, self.fleet_lost_gpu_s)


@dataclass(frozen=True)
class ComponentsIndexResult:
    """Components, largest loss first (then by name); totals over the same range."""

    rows: list[ComponentRow]
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float

    @property
    def fleet_lost_gpu_hours(self) -> float:
        return self.fleet_lost_gpu_s / HOUR_S


class ComponentsIndexQueryRunner:
    def __init__(self, query: ComponentsIndexQuery) -> None:
        self.query = query

    def calculate(self) -> ComponentsIndexResult:
        mapping = phase_components()
        sums = dict(day_rows(self.query.range).values("category")
                    .annotate(gpu_s=Sum("gpu_seconds")).values_list("category", "gpu_s"))
        lost: dict[str, float] = defaultdict(float)
        for category, gpu_s in sums.items():
            if category != PRODUCTIVE:
                lost[component_of(category, mapping)] += gpu_s or 0.0
        wall = sum(v or 0.0 for v in sums.values())
        fleet_lost = sum(lost.values())
        teams, counts = owner_teams(), _rollout_counts(self.query.range)
        rows = [ComponentRow(name, teams.get(name, ""), lost.get(name, 0.0), wall, fleet_lost,
                             counts.get(name, 0))
                for name in sorted({*component_names(), *lost})]
        rows.sort(key=lambda r: (-r.lost_gpu_s, r.name))
        return ComponentsIndexResult(rows, wall, fleet_lost)


def _rollout_counts(query_range: DateRange) -> dict[str, int]:
    low, high = query_range.epoch_bounds
    rows: Any = (Rollout.objects.filter(at__gte=datetime.fromtimestamp(low, UTC),
                                        at__lt=datetime.fromtimestamp(high, UTC))
                 .values("component").annotate(n=Count("id")))
    return {row["component"]: row["n"] for row in rows}
