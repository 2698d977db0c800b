"""Rollout markers: which rollouts to draw on a time chart, already safe to show.

Every ETT% trend (the fleet's, a component's) marks the rollouts that happened in its range,
so a step in the line can be read next to the change that caused it. The query returns what
a marker shows and nothing else: the scope as one line of words, and the link only when it is
an ``http(s)`` URL, because a stored ``javascript:`` link must never become clickable.

A page filtered to some jobs (a model, team or cluster) shows the rollouts that can have
reached them (:func:`reaching`); the rollouts list (:class:`RolloutListQuery`) filters the
same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final

from django.db.models import F, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import OrderBy

from ettweb.platform.text import http_link
from ettweb.queries.base import ANY_JOB, DateRange, JobFilter
from ettweb.queries.exposed import hidden, zulu
from ettweb.queries.registry import Query, runner_for
from ettweb.rollouts.models import ImpactSummary, Rollout
from ettweb.rollouts.scope import ScopeError, parse_scope

if TYPE_CHECKING:
    from ettweb.queries.impact import ImpactResult

#: Shown instead of a stored scope that no longer parses (the page must still render).
INVALID_SCOPE: Final = "(invalid scope)"
#: A filter's label and the scope field that lists values of it.
SCOPE_FIELDS: Final = (("model", "models"), ("team", "teams"), ("cluster", "clusters"))
#: Most rollouts the list shows (newest first); the total is counted beyond it.
LIST_LIMIT: Final = 500


def reaching(rows: QuerySet[Rollout], jobs: JobFilter) -> QuerySet[Rollout]:
    """The rollouts among ``rows`` whose scope can include the jobs ``jobs`` keeps, decided in
    Postgres: for every label the filter names, the scope leaves that field out or lists the
    value (a fleet-wide rollout always reaches). A GPU-size bucket and a ``job_pattern``
    never rule a rollout out: no scope names a GPU count, and a pattern is a matter of each
    job's id, not of its labels."""
    for label, listed in SCOPE_FIELDS:
        value = getattr(jobs, label)
        if value:
            rows = rows.filter(~Q(scope__has_key=listed)
                               | Q(**{f"scope__{listed}__contains": [value]}))
    return rows


@dataclass(frozen=True)
class RolloutMarkersQuery(Query["RolloutMarkersResult"]):
    """Rollouts deployed inside ``range`` (UTC days, inclusive), optionally of one component,
    and of those that can reach the jobs ``jobs`` keeps."""

    range: DateRange
    component: str | None = None
    jobs: JobFilter = ANY_JOB


@dataclass(frozen=True)
class RolloutMarker:
    """One rollout as a chart shows it; ``link`` is ``""`` unless it is http(s).

    The link is checked here, when the marker is made, so no marker anywhere (the query's,
    a test's) can carry a ``javascript:`` link into a chart's hover text.
    """

    id: int
    name: str
    component: str
    at: datetime = field(metadata=zulu())
    scope: str
    link: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "link", http_link(self.link))


@dataclass(frozen=True)
class RolloutMarkersResult:
    """Markers sorted by time (then id, so equal times keep a stable order)."""

    markers: list[RolloutMarker]

    @property
    def components(self) -> list[str]:
        return sorted({m.component for m in self.markers})


def describe_scope(raw: object) -> str:
    """A stored scope in words; an unparsable one is named as such rather than raising."""
    try:
        return parse_scope(raw).describe()
    except ScopeError:
        return INVALID_SCOPE


def marker_of(rollout: Rollout) -> RolloutMarker:
    """A stored rollout as a marker (UTC time, scope in words, safe link)."""
    return RolloutMarker(id=rollout.pk, name=rollout.name, component=rollout.component,
                         at=rollout.at.astimezone(UTC), scope=describe_scope(rollout.scope),
                         link=rollout.link)


@runner_for(RolloutMarkersQuery)
class RolloutMarkersQueryRunner:
    def __init__(self, query: RolloutMarkersQuery) -> None:
        self.query = query

    def calculate(self) -> RolloutMarkersResult:
        low, high = self.query.range.epoch_bounds
        rows = Rollout.objects.filter(at__gte=datetime.fromtimestamp(low, UTC),
                                      at__lt=datetime.fromtimestamp(high, UTC))
        if self.query.component is not None:
            rows = rows.filter(component=self.query.component)
        rows = reaching(rows, self.query.jobs)
        return RolloutMarkersResult([marker_of(r) for r in rows.order_by("at", "id")])


# --------------------------------------------------------------------------- one record

@dataclass(frozen=True)
class RolloutRecord:
    """A stored rollout as the rollout API answers it (ETT_SPEC §6): what was recorded,
    as it was recorded (scope as given, link unchecked), who recorded it and when."""

    id: int
    name: str
    component: str
    at: datetime = field(metadata=zulu())
    scope: dict[str, Any]
    notes: str
    link: str
    created_by: str | None
    created_at: datetime = field(metadata=zulu())
    simulated: bool

    @classmethod
    def of(cls, rollout: Rollout) -> RolloutRecord:
        return cls(id=rollout.pk, name=rollout.name, component=rollout.component,
                   at=rollout.at, scope=dict(rollout.scope), notes=rollout.notes,
                   link=rollout.link,
                   created_by=rollout.created_by.get_username() if rollout.created_by else None,
                   created_at=rollout.created_at, simulated=rollout.simulated)


# --------------------------------------------------------------------------- the list

@dataclass(frozen=True)
class RolloutListQuery(Query["RolloutListResult"]):
    """The rollouts list: newest first, of one component (or any), deployed on or after
    ``date_from`` and on or before ``date_to`` (UTC days, either open), that can reach the
    jobs ``jobs`` keeps (see :func:`reaching`). At most ``limit`` rows; ``total`` counts all."""

    component: str = ""
    date_from: date | None = None
    date_to: date | None = None
    jobs: JobFilter = ANY_JOB
    limit: int = LIST_LIMIT
    verdict: str = ""  # one of LIST_VERDICTS, or any
    sort: str = "-at"  # one of LIST_SORTS

    def __post_init__(self) -> None:
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ValueError(f"date_from {self.date_from} is after date_to {self.date_to}")
        if self.verdict and self.verdict not in LIST_VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(LIST_VERDICTS)}, "
                             f"not {self.verdict!r}")
        if self.sort not in LIST_SORTS:
            raise ValueError(f"sort must be one of {', '.join(LIST_SORTS)}, not {self.sort!r}")
        if not 1 <= self.limit <= LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {LIST_LIMIT}, not {self.limit}")


#: The list's verdict filter: the adjusted ETT% verdict's words, the component verdict's,
#: or a rollout the warm pass has not computed yet.
LIST_VERDICTS: Final = ("improved", "regressed", "reduced", "increased", "inconclusive",
                        "not_computed")
#: The list's orders: by moment, by the adjusted ETT% change, by the component's change.
LIST_SORTS: Final = {"-at": ("-at", "-id"), "at": ("at", "id"),
                     "-ett_change": ("-s_adjusted", "-at"), "ett_change": ("s_adjusted", "-at"),
                     "component_change": ("s_component", "-at"),
                     "-component_change": ("-s_component", "-at")}
#: The window the list's verdicts are computed at (ETT_SPEC §6's default).
LIST_WINDOW_DAYS: Final = 14


@dataclass(frozen=True)
class Headline:
    """A rollout's stored impact headline (``ImpactSummary``) at ``LIST_WINDOW_DAYS``.

    The API shows §6.1's component verdict and §6.2's adjusted ETT% verdict, each with its
    deciding change and interval (the DiD's when it has one), as ``/rollouts/`` words them."""

    API_ORDER: ClassVar[tuple[str, ...]] = (
        "component_change_pts", "component_ci95_pts", "component_verdict",
        "adjusted_change_pts", "adjusted_ci95_pts", "adjusted_verdict")

    verdict: str = field(metadata=hidden())
    component_verdict: str
    component_change_pts: float | None
    component_ci95_pts: tuple[float, float] | None
    adjusted_verdict: str
    adjusted_change_pts: float | None
    adjusted_ci95_pts: tuple[float, float] | None
    partial: bool = field(metadata=hidden())
    computed_at: datetime = field(metadata=hidden())

    @classmethod
    def of(cls, result: ImpactResult, computed_at: datetime) -> Headline:
        """The headline of a computed impact: what the warm pass stores for the list, and
        what the component pages and the weekly e-mail show, so all three say the same."""
        effect, adjusted = result.component_effect, result.adjusted
        return cls(verdict=result.verdict, component_verdict=effect.verdict,
                   component_change_pts=effect.deciding_pts,
                   component_ci95_pts=effect.deciding_ci95_pts,
                   adjusted_verdict=adjusted.verdict, adjusted_change_pts=adjusted.deciding_pts,
                   adjusted_ci95_pts=adjusted.deciding_ci95_pts,
                   partial=result.windows.partial, computed_at=computed_at)



@dataclass(frozen=True)
class RolloutRow:
    """One line of the list: the marker's safe fields, who recorded it, whether the
    simulator did, and the warm pass's headline (None: not computed yet)."""

    marker: RolloutMarker
    created_by: str
    simulated: bool
    headline: Headline | None = None


@dataclass(frozen=True)
class RolloutListResult:
    rows: list[RolloutRow]
    total: int


@runner_for(RolloutListQuery)
class RolloutListQueryRunner:
    def __init__(self, query: RolloutListQuery) -> None:
        self.query = query

    def calculate(self) -> RolloutListResult:
        q = self.query
        rows = Rollout.objects.select_related("created_by").order_by("-at", "-id")
        if q.component:
            rows = rows.filter(component=q.component)
        if q.date_from:
            rows = rows.filter(at__date__gte=q.date_from)
        if q.date_to:
            rows = rows.filter(at__date__lte=q.date_to)
        rows = reaching(rows, q.jobs)
        rows = _with_headlines(rows, q.verdict).order_by(*_order(q.sort))
        summaries = {s.rollout_id: s for s in ImpactSummary.objects.filter(
            window_days=LIST_WINDOW_DAYS, rollout__in=[r.pk for r in rows[:q.limit]])}
        return RolloutListResult(
            rows=[RolloutRow(marker_of(r), r.created_by.get_username() if r.created_by else "",
                             r.simulated, _headline(summaries.get(r.pk)))
                  for r in rows[:q.limit]],
            total=rows.count())


def _with_headlines(rows: QuerySet[Rollout], verdict: str) -> QuerySet[Rollout]:
    """Annotate the headline numbers the list sorts by, and keep the ``verdict`` asked for
    (improved/regressed: the adjusted ETT% verdict; reduced/increased: the component's;
    inconclusive: both; not_computed: no summary yet)."""
    here = ImpactSummary.objects.filter(rollout=OuterRef("pk"), window_days=LIST_WINDOW_DAYS)
    rows = rows.annotate(
        s_adjusted=Subquery(here.values("adjusted_change_pts")[:1]),
        s_component=Subquery(here.values("component_change_pts")[:1]),
        s_adjusted_verdict=Subquery(here.values("adjusted_verdict")[:1]),
        s_component_verdict=Subquery(here.values("component_verdict")[:1]))
    if verdict in ("improved", "regressed"):
        return rows.filter(s_adjusted_verdict=verdict)
    if verdict in ("reduced", "increased"):
        return rows.filter(s_component_verdict=verdict)
    if verdict == "inconclusive":
        return rows.filter(s_adjusted_verdict="inconclusive",
                           s_component_verdict="inconclusive")
    if verdict == "not_computed":
        return rows.filter(s_adjusted_verdict__isnull=True)
    return rows


def _order(sort: str) -> list[OrderBy]:
    """``LIST_SORTS[sort]`` as expressions; a rollout not computed yet sorts last either
    way."""
    return [F(name[1:]).desc(nulls_last=True) if name.startswith("-")
            else F(name).asc(nulls_last=True) for name in LIST_SORTS[sort]]


def _pair(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def stored_headlines(rollout_ids: Iterable[int]) -> dict[int, Headline]:
    """The warm pass's headlines of these rollouts (what ``/rollouts/`` shows), by id; a
    rollout not computed yet is left out."""
    summaries = ImpactSummary.objects.filter(window_days=LIST_WINDOW_DAYS,
                                             rollout__in=list(rollout_ids))
    return {s.rollout_id: headline for s in summaries
            if (headline := _headline(s)) is not None}


def _headline(s: ImpactSummary | None) -> Headline | None:
    if s is None:
        return None
    return Headline(s.verdict, s.component_verdict, s.component_change_pts,
                    _pair(s.component_ci_low, s.component_ci_high), s.adjusted_verdict,
                    s.adjusted_change_pts, _pair(s.adjusted_ci_low, s.adjusted_ci_high),
                    s.partial, s.computed_at)
