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

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Final

from django.db.models import Q, QuerySet

from ettweb.queries.base import ANY_JOB, DateRange, JobFilter
from ettweb.rollouts.logic import http_link
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import ScopeError, parse_scope

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
    for label, field in SCOPE_FIELDS:
        value = getattr(jobs, label)
        if value:
            rows = rows.filter(~Q(scope__has_key=field)
                               | Q(**{f"scope__{field}__contains": [value]}))
    return rows


@dataclass(frozen=True)
class RolloutMarkersQuery:
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
    at: datetime
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


def marker_api(marker: RolloutMarker) -> dict[str, Any]:
    """A marker as the API answers it (what the chart's hover shows)."""
    return {"id": marker.id, "name": marker.name, "component": marker.component,
            "at": marker.at.isoformat().replace("+00:00", "Z"), "scope": marker.scope,
            "link": marker.link}


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


# --------------------------------------------------------------------------- the list

@dataclass(frozen=True)
class RolloutListQuery:
    """The rollouts list: newest first, of one component (or any), deployed on or after
    ``date_from`` and on or before ``date_to`` (UTC days, either open), that can reach the
    jobs ``jobs`` keeps (see :func:`reaching`). At most ``limit`` rows; ``total`` counts all."""

    component: str = ""
    date_from: date | None = None
    date_to: date | None = None
    jobs: JobFilter = ANY_JOB
    limit: int = LIST_LIMIT

    def __post_init__(self) -> None:
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ValueError(f"date_from {self.date_from} is after date_to {self.date_to}")
        if not 1 <= self.limit <= LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {LIST_LIMIT}, not {self.limit}")


@dataclass(frozen=True)
class RolloutRow:
    """One line of the list: the marker's safe fields, who recorded it and whether the
    simulator did."""

    marker: RolloutMarker
    created_by: str
    simulated: bool


@dataclass(frozen=True)
class RolloutListResult:
    rows: list[RolloutRow]
    total: int


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
        return RolloutListResult(
            rows=[RolloutRow(marker_of(r), r.created_by.get_username() if r.created_by else "",
                             r.simulated) for r in rows[:q.limit]],
            total=rows.count())
