"""Detected changes (ETT_SPEC §6.3), each matched to the rollout that explains it, if any.

Detection is beat's (``ettweb.changes``): it stores level shifts in every component's daily
lost share, for the fleet and each team. Matching happens here, on every read, so a rollout
recorded after the change was found explains it at once (and an edited one follows): a
change's rollout is a recorded rollout to its component deployed within
:data:`MATCH_DAYS` UTC days of the change's day whose scope holds that team's jobs — for the
fleet's own series, any rollout to the component. A change that no rollout explains is
*unrecorded*: the changes page, the charts' marks and the weekly e-mail single those out.

A scope "holds a team's jobs" as the rollouts list and the filtered pages decide it
(``markers.reaching``): its ``teams`` are not given or name the team; a model, cluster or
job-pattern scope can reach some of the team's jobs, and counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar, Final

from django.db.models import F, Q

from ettweb.changes.models import Change
from ettweb.queries.base import FIRST_DAY, LAST_DAY, MAX_LABEL_CHARS
from ettweb.queries.exposed import as_api, doc, hidden
from ettweb.queries.registry import Query, runner_for
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import ScopeError, parse_scope

#: A rollout explains a change when deployed within this many UTC days of the change's day.
MATCH_DAYS: Final = 2
#: Most changes a list shows (newest first); the total is counted beyond it.
LIST_LIMIT: Final = 500


@dataclass(frozen=True)
class ChangesQuery(Query["ChangesResult"]):
    """Changes whose day is in ``date_from``..``date_to`` (inclusive UTC days, either
    open), of one component and one team (``""``: any; the fleet's own series have no
    team), newest first (a day's by component, the fleet's before its teams'), at most
    ``limit``."""

    date_from: date | None = None
    date_to: date | None = None
    component: str = ""
    team: str = ""
    limit: int = LIST_LIMIT

    def __post_init__(self) -> None:
        for name in ("date_from", "date_to"):
            day = getattr(self, name)
            if day is not None and not FIRST_DAY <= day <= LAST_DAY:
                raise ValueError(f"{name} {day} is outside {FIRST_DAY} to {LAST_DAY}")
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ValueError(f"date_from {self.date_from} is after date_to {self.date_to}")
        for name in ("component", "team"):
            if len(getattr(self, name)) > MAX_LABEL_CHARS:
                raise ValueError(f"{name} must be at most {MAX_LABEL_CHARS} characters")
        if not 1 <= self.limit <= LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {LIST_LIMIT}, not {self.limit}")


@dataclass(frozen=True)
class RolloutRef:
    """The rollout a change is matched to, as a link shows it."""

    id: int
    name: str
    at: datetime


@dataclass(frozen=True)
class DetectedChange:
    """One change: the first UTC day at the new level, the lost share (points of the
    group's wall time) the days either side, and its rollout (None: unrecorded)."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("change_pts", "rollout_id")

    component: str
    team: str | None = field(metadata=doc("null: the fleet's own series"))
    day: date = field(metadata=doc("the first UTC day at the new level"))
    before_lost_pct: float
    after_lost_pct: float
    detected_at: datetime = field(metadata=hidden())
    rollout: RolloutRef | None = field(metadata=hidden())

    @property
    def change_pts(self) -> float:
        return self.after_lost_pct - self.before_lost_pct

    @property
    def rollout_id(self) -> int | None:
        """the recorded rollout that explains it; null: unrecorded"""
        return self.rollout.id if self.rollout else None

    @property
    def unrecorded(self) -> bool:
        return self.rollout is None

    def as_api(self) -> dict[str, Any]:
        """ETT_SPEC §6.3's fields, percentages unrounded."""
        return as_api(self)


@dataclass(frozen=True)
class ChangesResult:
    """The changes, newest day first; ``total`` counts all that matched the filter."""

    changes: list[DetectedChange]
    total: int = field(metadata=hidden())  # the page's count; the API lists them all

    @property
    def unrecorded(self) -> list[DetectedChange]:
        return [c for c in self.changes if c.unrecorded]

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(ChangesQuery)
class ChangesQueryRunner:
    def __init__(self, query: ChangesQuery) -> None:
        self.query = query

    def calculate(self) -> ChangesResult:
        q = self.query
        rows = Change.objects.order_by("-day", "component", F("team").asc(nulls_first=True), "id")
        if q.date_from:
            rows = rows.filter(day__gte=q.date_from)
        if q.date_to:
            rows = rows.filter(day__lte=q.date_to)
        if q.component:
            rows = rows.filter(component=q.component)
        if q.team:
            rows = rows.filter(team=q.team)
        changes = list(rows[:q.limit])
        matches = matched_rollouts(changes)
        return ChangesResult(
            changes=[DetectedChange(c.component, c.team, c.day, c.before_lost_pct,
                                    c.after_lost_pct, c.detected_at, matches.get(c.pk))
                     for c in changes],
            total=rows.count())


def matched_rollouts(changes: list[Change]) -> dict[int, RolloutRef]:
    """Each change's rollout (by the change's id), read in one query: the candidate
    nearest the day before the change's day (the day a rollout usually lands on), then
    the earliest deployed."""
    if not changes:
        return {}
    low = _midnight(min(c.day for c in changes) - timedelta(days=MATCH_DAYS))
    high = _midnight(max(c.day for c in changes) + timedelta(days=MATCH_DAYS + 1))
    rollouts = list(Rollout.objects.filter(Q(component__in={c.component for c in changes}),
                                           at__gte=low, at__lt=high).order_by("at", "id"))
    found: dict[int, RolloutRef] = {}
    for change in changes:
        candidates = [r for r in rollouts if r.component == change.component
                      and abs((change.day - _day(r)).days) <= MATCH_DAYS
                      and holds(r.scope, change.team)]
        if candidates:
            best = min(candidates, key=lambda r: (abs((change.day - _day(r)).days - 1), r.at))
            found[change.pk] = RolloutRef(best.pk, best.name, best.at.astimezone(UTC))
    return found


def holds(scope: object, team: str | None) -> bool:
    """Whether a rollout of this stored scope can explain a change of ``team``'s series
    (None: the fleet's, which any rollout can). A scope that no longer parses explains
    only the fleet's."""
    if team is None:
        return True
    try:
        teams = parse_scope(scope).teams
    except ScopeError:
        return False
    return teams is None or team in teams


def _day(rollout: Rollout) -> date:
    return rollout.at.astimezone(UTC).date()


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)
