"""Every component side by side: the components page and ``/api/v1/components``.

Each component's lost time over a range with its share of the fleet's wall and lost time,
the lost-share trend drawn above the table, and how many rollouts can reach the filtered
jobs. The numbers are the one-component query's (``components``), summed the same way, so
the index and a component's own page agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, ClassVar

from django.db.models import Count

from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    DateRange,
    Interval,
    JobFilter,
    pct,
    phase_components,
)
from ettweb.queries.components import (
    Owner,
    component_names,
    owner_teams,
    owners_by_component,
    period_category_sums,
)
from ettweb.queries.exposed import as_api, doc, hidden
from ettweb.queries.markers import reaching
from ettweb.queries.registry import Query, runner_for
from ettweb.rollouts.models import Rollout


@dataclass(frozen=True)
class ComponentsIndexQuery(Query["ComponentsIndexResult"]):
    """Every component with its lost time over ``range`` (of the jobs ``jobs`` keeps; the
    rollout counts are of the rollouts whose scope can reach them)."""

    range: DateRange
    jobs: JobFilter = ANY_JOB
    #: The periods of the lost-share trend the page draws above its table.
    interval: Interval = "day"


@dataclass(frozen=True)
class ComponentRow:
    """One component in the components page's table: its lost time over the range, and
    its share of the fleet's wall and lost time there."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("lost_share_pts", "share_of_fleet_lost_pct")
    API_ORDER: ClassVar[tuple[str, ...]] = ("name", "owner_team", "owners", "lost_gpu_s",
                                            *API_PROPERTIES, "rollouts")

    name: str
    owner_team: str = field(metadata=doc("free-text label: the team to talk to"))
    owners: tuple[Owner, ...] = field(metadata=doc("who may edit it: its owner-role users, "
                                                   "by username"))
    lost_gpu_s: float
    fleet_wall_gpu_s: float = field(metadata=hidden())  # what the shares are of
    fleet_lost_gpu_s: float = field(metadata=hidden())
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

    API_ORDER: ClassVar[tuple[str, ...]] = ("fleet_wall_gpu_s", "fleet_lost_gpu_s", "periods",
                                            "lost_share_pts", "components")

    components: list[ComponentRow]
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float
    #: Periods with (filtered) fleet data, and each losing component's share of each
    #: period's wall time in points: which component's loss grew or shrank over the range.
    periods: list[date] = field(default_factory=list)
    lost_share_pts: dict[str, list[float]] = field(default_factory=dict)

    @property
    def fleet_lost_gpu_hours(self) -> float:
        return self.fleet_lost_gpu_s / HOUR_S

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(ComponentsIndexQuery)
class ComponentsIndexQueryRunner:
    def __init__(self, query: ComponentsIndexQuery) -> None:
        self.query = query

    def calculate(self) -> ComponentsIndexResult:
        q = self.query
        mapping = phase_components()
        by_period = period_category_sums(q.range, q.interval, q.jobs)
        sums: dict[str, float] = defaultdict(float)
        for (_, category), gpu_s in by_period.items():
            sums[category] += gpu_s
        lost: dict[str, float] = defaultdict(float)
        for category, gpu_s in sums.items():
            if category != PRODUCTIVE:
                lost[component_of(category, mapping)] += gpu_s
        wall = sum(sums.values())
        fleet_lost = sum(lost.values())
        teams, owners = owner_teams(), owners_by_component()
        counts = _rollout_counts(self.query.range, self.query.jobs)
        rows = [ComponentRow(name, teams.get(name, ""), owners.get(name, ()), lost.get(name, 0.0),
                             wall, fleet_lost, counts.get(name, 0))
                for name in sorted({*component_names(), *lost})]
        rows.sort(key=lambda r: (-r.lost_gpu_s, r.name))
        periods, shares = _share_trend(by_period, mapping, [r.name for r in rows if r.lost_gpu_s])
        return ComponentsIndexResult(rows, wall, fleet_lost, periods, lost_share_pts=shares)


def _share_trend(by_period: Mapping[tuple[date, str], float], mapping: Mapping[str, str],
                 names: list[str]) -> tuple[list[date], dict[str, list[float]]]:
    """Each of ``names``' lost GPU-seconds as points of its period's wall time, for every
    period with wall time (in the order of ``names``: largest loser first)."""
    wall: dict[date, float] = defaultdict(float)
    lost: dict[tuple[date, str], float] = defaultdict(float)
    for (period, category), gpu_s in by_period.items():
        wall[period] += gpu_s
        if category != PRODUCTIVE:
            lost[(period, component_of(category, mapping))] += gpu_s
    periods = [p for p in sorted(wall) if wall[p] > 0]
    return periods, {name: [pct(lost[(p, name)], wall[p]) for p in periods] for name in names}


def _rollout_counts(query_range: DateRange, jobs: JobFilter) -> dict[str, int]:
    low, high = query_range.epoch_bounds
    rows: Any = (reaching(Rollout.objects.filter(at__gte=datetime.fromtimestamp(low, UTC),
                                                 at__lt=datetime.fromtimestamp(high, UTC)),
                          jobs)
                 .values("component").annotate(n=Count("id")))
    return {row["component"]: row["n"] for row in rows}
