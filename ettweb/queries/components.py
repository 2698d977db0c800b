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
from typing import Any, ClassVar, Final

from django.db import connection
from django.db.models import Count, Max, Min, Q, Sum

from ettweb.access.roles import component_owners
from ettweb.attribution.components import PRODUCTIVE, UNKNOWN_COMPONENT, component_of
from ettweb.components.known import known_components
from ettweb.components.models import Component
from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    INTERVALS,
    DateRange,
    Interval,
    JobFilter,
    as_date,
    category_rows,
    day_rows,
    pct,
    periods,
    phase_components,
    validated,
)
from ettweb.queries.exposed import as_api, doc, hidden, inline
from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner, ImpactResult
from ettweb.queries.markers import (
    Headline,
    RolloutMarker,
    RolloutMarkersQuery,
    RolloutMarkersQueryRunner,
    reaching,
)
from ettweb.queries.registry import Query, runner_for
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
class ComponentQuery(Query["ComponentResult | None"]):
    """One component's lost time per day or week over ``range``, its top jobs and models,
    and its rollouts in the range with their measured impact.

    ``jobs`` narrows every number to the filtered jobs (the "fleet" totals too, so a lost
    share is of the filtered jobs' wall time) and the rollouts to those whose scope can
    reach them; a rollout's measured impact stays its own (its scope against the rest).
    """

    name: str
    range: DateRange
    interval: Interval = "day"
    top: int = 10
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        validated("interval", self.interval, INTERVALS)
        if not 1 <= self.top <= 100:
            raise ValueError(f"top must be between 1 and 100, not {self.top}")


@dataclass(frozen=True)
class ComponentPoint:
    """One period: the component's lost GPU-s and the whole fleet's wall GPU-s."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("lost_share_pts",)

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

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("lost_share_pts",)

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
    """A rollout of the component and its impact (None: not measured on this page): the
    headline's verdicts, the marker, then the impact's change (ETT% points of the jobs in
    scope), its interval, the DiD and the unadjusted verdict."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("change_pts", "ci95_pts", "did_pts", "verdict")

    #: The impact's headline, worded as ``/rollouts/`` and the weekly e-mail word it.
    headline: Headline | None = field(default=None, kw_only=True, metadata=inline())
    marker: RolloutMarker = field(metadata=inline())
    impact: ImpactResult | None = field(metadata=hidden())

    @property
    def change_pts(self) -> float | None:
        return self.impact.treated.change_pts if self.impact else None

    @property
    def ci95_pts(self) -> tuple[float, float] | None:
        return self.impact.treated.ci95_pts if self.impact else None

    @property
    def did_pts(self) -> float | None:
        return self.impact.did_pts if self.impact else None

    @property
    def verdict(self) -> str | None:
        return self.impact.verdict if self.impact else None


@dataclass(frozen=True)
class Owner:
    """A person who owns a component: a user the owner role lets edit it (their
    ``ComponentOwner`` row), as the pages and the API name them."""

    username: str
    name: str = field(metadata=doc("their full name; empty when the account has none"))

    def __str__(self) -> str:
        return f"{self.name} ({self.username})" if self.name else self.username

    def as_api(self) -> dict[str, str]:
        return as_api(self)


def owners_by_component(names: Iterable[str] | None = None) -> dict[str, tuple[Owner, ...]]:
    """Each component's owners by username (of ``names``, else of every owned component)."""
    return {component: tuple(Owner(user.username, user.get_full_name()) for user in users)
            for component, users in component_owners(names).items()}


@dataclass(frozen=True)
class RolloutsOutside:
    """The component's rollouts (that can reach the filtered jobs) before and after the range,
    and the first and last day of all of them: a page whose range holds none of the six
    rollouts a component has must say so, not "no rollouts"."""

    before: int = 0
    after: int = 0
    first: date | None = None
    last: date | None = None

    @property
    def count(self) -> int:
        return self.before + self.after



@dataclass(frozen=True)
class ComponentResult:
    """One component's page: lost time per period, its top jobs and models, its rollouts;
    fleet totals are over the same range."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "lost_share_pts", "share_of_fleet_lost_pct", "unmeasured_rollouts")
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "name", "owner_team", "owners", "lost_gpu_s", "lost_share_pts",
        "share_of_fleet_lost_pct", "fleet_wall_gpu_s", "fleet_lost_gpu_s", "categories",
        "points", "top_jobs", "top_models", "rollouts", "unmeasured_rollouts",
        "rollouts_outside_range")

    name: str
    owner_team: str = field(metadata=doc("free-text label: the team to talk to"))
    owners: tuple[Owner, ...] = field(metadata=doc("who may edit it: its owner-role users, "
                                                   "by username"))
    categories: dict[str, float]
    points: list[ComponentPoint]
    lost_gpu_s: float
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float
    top_jobs: list[ComponentJob]
    top_models: list[ComponentModel]
    markers: list[RolloutMarker] = field(default_factory=list, metadata=hidden())
    rollouts: list[ComponentRollout] = field(default_factory=list)
    rollouts_outside_range: RolloutsOutside = RolloutsOutside()

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

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(ComponentQuery)
class ComponentQueryRunner:
    """Runs a :class:`ComponentQuery`; ``calculate()`` is None for an unknown component."""

    def __init__(self, query: ComponentQuery) -> None:
        self.query = query

    def calculate(self) -> ComponentResult | None:
        q = self.query
        if q.name not in component_names():
            return None
        mapping = phase_components()
        by_period = period_category_sums(q.range, q.interval, q.jobs)
        categories = owned_categories(q.name, {c for _, c in by_period}, mapping)
        points = _points(by_period, categories)
        markers = _markers(q.range, q.name, q.jobs)
        return ComponentResult(
            name=q.name, owner_team=owner_teams().get(q.name, ""),
            owners=owners_by_component([q.name]).get(q.name, ()),
            categories={c: sum(v for (_, cat), v in by_period.items() if cat == c)
                        for c in sorted(categories)},
            points=points, lost_gpu_s=sum(p.lost_gpu_s for p in points),
            fleet_wall_gpu_s=sum(by_period.values()),
            fleet_lost_gpu_s=sum(v for (_, c), v in by_period.items() if c != PRODUCTIVE),
            top_jobs=_top_jobs(q.range, categories, q.top, q.jobs),
            top_models=_top_models(q.range, categories, q.top, q.jobs),
            markers=markers, rollouts=_measured(markers),
            rollouts_outside_range=_outside(q.range, q.name, q.jobs),
        )


def owner_teams() -> dict[str, str]:
    """Each component's owner team: a free-text label for people to read (who to talk to),
    not who may edit it (that is :func:`owners_by_component`)."""
    return dict(Component.objects.values_list("name", "owner_team"))


def _outside(query_range: DateRange, component: str, jobs: JobFilter) -> RolloutsOutside:
    low, high = query_range.epoch_bounds
    rows = reaching(Rollout.objects.filter(component=component), jobs)
    start, end = datetime.fromtimestamp(low, UTC), datetime.fromtimestamp(high, UTC)
    found = rows.aggregate(before=Count("id", filter=Q(at__lt=start)),
                           after=Count("id", filter=Q(at__gte=end)),
                           first=Min("at"), last=Max("at"))
    return RolloutsOutside(before=found["before"], after=found["after"],
                           first=found["first"].astimezone(UTC).date() if found["first"] else None,
                           last=found["last"].astimezone(UTC).date() if found["last"] else None)


def _markers(query_range: DateRange, component: str, jobs: JobFilter) -> list[RolloutMarker]:
    return RolloutMarkersQueryRunner(RolloutMarkersQuery(query_range, component, jobs)) \
        .calculate().markers


def period_category_sums(query_range: DateRange, interval: Interval,
                          jobs: JobFilter) -> dict[tuple[date, str], float]:
    """The (filtered) fleet's GPU-s per (period, category), productive included: one grouped
    read."""
    rows = (periods(category_rows(query_range, jobs), interval).values("period", "category")
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


def _lost_by_job(query_range: DateRange, categories: set[str], jobs: JobFilter) -> Any:
    """Each job's GPU-s lost to ``categories`` inside the range (a queryset of ``job_id`` and
    ``lost``): only those categories' day rows are read."""
    return (day_rows(query_range, jobs).filter(category__in=categories).values("job_id")
            .annotate(lost=Sum("gpu_seconds")))


def _top_jobs(query_range: DateRange, categories: set[str], top: int,
              jobs: JobFilter) -> list[ComponentJob]:
    if not categories:
        return []
    rows = list(_lost_by_job(query_range, categories, jobs).filter(lost__gt=0)
                .order_by("-lost", "job_id")[:top])
    ids = [row["job_id"] for row in rows]
    walls = dict(day_rows(query_range).filter(job_id__in=ids).values("job_id")
                 .annotate(wall=Sum("gpu_seconds")).values_list("job_id", "wall"))
    meta = {r.job: r for r in JobRollup.objects.filter(job__in=ids)}
    return [ComponentJob(job=row["job_id"], lost_gpu_s=row["lost"],
                         wall_gpu_s=walls.get(row["job_id"]) or 0.0,
                         gpus=meta[row["job_id"]].gpus, model=meta[row["job_id"]].model,
                         team=meta[row["job_id"]].team)
            for row in rows]


def _top_models(query_range: DateRange, categories: set[str], top: int,
                jobs: JobFilter) -> list[ComponentModel]:
    """The models whose jobs lost the most to ``categories``, with how many jobs lost any.

    Grouped per job first, then per model: grouping the day rows by model directly joined
    every row to its job and counted distinct jobs by sorting them.
    """
    if not categories:
        return []
    sql, params = _lost_by_job(query_range, categories, jobs).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.model, SUM(l.lost), COUNT(*) FROM ({sql}) l "
            f"JOIN {JobRollup._meta.db_table} r ON r.job = l.job_id GROUP BY r.model "
            "HAVING SUM(l.lost) > 0 ORDER BY 2 DESC, 1 LIMIT %s", [*params, top])
        rows = cursor.fetchall()
    return [ComponentModel(model or NO_MODEL, lost, count) for model, lost, count in rows]


def _measured(markers: list[RolloutMarker]) -> list[ComponentRollout]:
    """The newest rollouts with their impact (the lead's §6 query, default window)."""
    newest = sorted(markers, key=lambda m: (m.at, m.id), reverse=True)[:MAX_IMPACT_ROWS]
    now = datetime.now(UTC)
    rows = []
    for marker in newest:
        impact = ImpactQueryRunner(ImpactQuery(marker.id)).calculate()
        rows.append(ComponentRollout(marker, impact,
                                     headline=Headline.of(impact, now) if impact else None))
    return rows
