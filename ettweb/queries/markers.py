"""Rollout markers: which rollouts to draw on a time chart, already safe to show.

Every ETT% trend (the fleet's, a component's) marks the rollouts that happened in its range,
so a step in the line can be read next to the change that caused it. The query returns what
a marker shows and nothing else: the scope as one line of words, and the link only when it is
an ``http(s)`` URL, because a stored ``javascript:`` link must never become clickable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from ettweb.queries.base import DateRange
from ettweb.rollouts.logic import http_link
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import ScopeError, parse_scope

#: Shown instead of a stored scope that no longer parses (the page must still render).
INVALID_SCOPE: Final = "(invalid scope)"


@dataclass(frozen=True)
class RolloutMarkersQuery:
    """Rollouts deployed inside ``range`` (UTC days, inclusive), optionally of one component."""

    range: DateRange
    component: str | None = None


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


class RolloutMarkersQueryRunner:
    def __init__(self, query: RolloutMarkersQuery) -> None:
        self.query = query

    def calculate(self) -> RolloutMarkersResult:
        low, high = self.query.range.epoch_bounds
        rows = Rollout.objects.filter(at__gte=datetime.fromtimestamp(low, UTC),
                                      at__lt=datetime.fromtimestamp(high, UTC))
        if self.query.component is not None:
            rows = rows.filter(component=self.query.component)
        return RolloutMarkersResult([marker_of(r) for r in rows.order_by("at", "id")])
