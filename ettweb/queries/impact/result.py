"""The impact query and its result (ETT_SPEC §6, §6.1, §6.2, §6.4): frozen types, and the
JSON the API answers.

The types hold numbers already worked out (:mod:`ettweb.queries.impact.verdicts` fills them)
so that a page, the API, the weekly report and the stored headline all read one result and
cannot disagree on a field. Each type declares the fields its JSON shows
(:mod:`ettweb.queries.exposed`); ``as_api()`` and the rollout API's schemas are both built
from that one declaration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Final, Literal, Protocol

from ettweb.queries.exposed import as_api, hidden, inline, shown_as, zulu
from ettweb.queries.impact.windows import Windows
from ettweb.queries.registry import Query
from ettweb.rollouts.scope import Scope
from ettweb.statistics import estimators
from ettweb.statistics.estimators import MIN_JOBS_FOR_INTERVAL, Detectability

DEFAULT_WINDOW_DAYS: Final = 14
MIN_WINDOW_DAYS: Final = 1
MAX_WINDOW_DAYS: Final = 90
Verdict = Literal["improved", "regressed", "inconclusive"]
VERDICTS: Final[tuple[Verdict, ...]] = ("improved", "regressed", "inconclusive")
#: The rollout's own component (ETT_SPEC §6.1): its lost share went down, up, or no call.
ComponentVerdict = Literal["reduced", "increased", "inconclusive"]
COMPONENT_VERDICTS: Final[tuple[ComponentVerdict, ...]] = ("reduced", "increased",
                                                           "inconclusive")
#: What the adjusted estimate is called in the API
#: (``docs/explanation/rollout-statistics.md`` explains it).
ADJUSTED_METHOD: Final = "size-stratified"


class WindowError(ValueError):
    """A window outside 1-90 days (the API answers 400 with this message)."""


@dataclass(frozen=True)
class ImpactQuery(Query["ImpactResult | None"]):
    """The impact of rollout ``rollout_id`` over windows of ``window_days`` UTC days.

    ``with_trend`` adds the per-day treated and control ETT% the rollout page draws.
    """

    rollout_id: int
    window_days: int = DEFAULT_WINDOW_DAYS
    with_trend: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.window_days, bool) or not isinstance(self.window_days, int):
            raise WindowError("must be a whole number of days")
        if not MIN_WINDOW_DAYS <= self.window_days <= MAX_WINDOW_DAYS:
            raise WindowError(f"must be between {MIN_WINDOW_DAYS} and {MAX_WINDOW_DAYS} "
                              f"days, not {self.window_days}")



@dataclass(frozen=True)
class GroupImpact:
    """Treated or control: jobs per window, ETT% before/after, the change and its interval."""

    jobs_before: int
    jobs_after: int
    before_ett_pct: float | None
    after_ett_pct: float | None
    change_pts: float | None
    change_rel: float | None
    ci95_pts: tuple[float, float] | None

    @property
    def enough_jobs(self) -> bool:
        return min(self.jobs_before, self.jobs_after) >= MIN_JOBS_FOR_INTERVAL

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class ComponentShift:
    """One component's lost share of the treated jobs' wall time, in points, per window."""

    API_PROPERTIES = ("change_pts", "change_rel")

    component: str = field(metadata=hidden())  # the key it is listed under
    before_lost_pct: float | None
    after_lost_pct: float | None

    @property
    def change_pts(self) -> float | None:
        if self.before_lost_pct is None or self.after_lost_pct is None:
            return None
        return self.after_lost_pct - self.before_lost_pct

    @property
    def change_rel(self) -> float | None:
        """after / before - 1 (ETT_SPEC §6 asks for both ways); None from a zero share."""
        if not self.before_lost_pct or self.after_lost_pct is None:
            return None
        return self.after_lost_pct / self.before_lost_pct - 1.0

    def as_api(self) -> dict[str, float | None]:
        return as_api(self)


@dataclass(frozen=True)
class Inconclusive:
    """What an inconclusive verdict would take (see :func:`estimators.detectability`): the
    smallest change this window detects with 80% power, and the days each window would
    need for a change of the current estimate's size (None: the estimate is 0)."""

    mde_pts: float
    days_needed: int | None
    more_days: int | None

    @classmethod
    def of(cls, found: Detectability | None, window_days: int) -> Inconclusive | None:
        if found is None:
            return None
        return cls(found.mde_pts, found.days_needed, found.more_days(window_days))

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class LostShare:
    """One group's lost share of the rollout's component (ETT_SPEC §6.1), in points."""

    API_PROPERTIES = ("change_pts", "change_rel")
    API_ORDER = ("before_lost_pct", "after_lost_pct", "change_pts", "change_rel", "ci95_pts")

    before_lost_pct: float | None
    after_lost_pct: float | None
    ci95_pts: tuple[float, float] | None

    @property
    def change_pts(self) -> float | None:
        if self.before_lost_pct is None or self.after_lost_pct is None:
            return None
        return self.after_lost_pct - self.before_lost_pct

    @property
    def change_rel(self) -> float | None:
        return estimators.percent_change(self.after_lost_pct, self.before_lost_pct)

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


class Change(Protocol):
    """A group's change and its interval, as §6.1 and §6.2 give them."""

    @property
    def change_pts(self) -> float | None: ...

    @property
    def ci95_pts(self) -> tuple[float, float] | None: ...


class Deciding:
    """What a §6.1 or §6.2 verdict reads: the difference in differences when it has an
    interval, else the treated group's own change (a fleet-wide rollout has no control)."""

    treated: Change
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None

    @property
    def deciding_pts(self) -> float | None:
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    @property
    def deciding_ci95_pts(self) -> tuple[float, float] | None:
        return self.did_ci95_pts if self.did_ci95_pts is not None else self.treated.ci95_pts


@dataclass(frozen=True)
class ComponentEffect(Deciding):
    """ETT_SPEC §6.1: the rollout's component's lost share, treated and control, with
    intervals from the same draws as ETT%'s, and its verdict."""

    component: str
    treated: LostShare
    control: LostShare | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    verdict: ComponentVerdict
    verdict_reason: str
    inconclusive: Inconclusive | None

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class AdjustedChange:
    """One group's adjusted ETT% change and its interval."""

    change_pts: float | None
    ci95_pts: tuple[float, float] | None

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class AdjustedEffect(Deciding):
    """ETT_SPEC §6.2: the variance-reduced ETT% change (``ADJUSTED_METHOD``), beside §6's."""

    method: str
    treated: AdjustedChange
    control: AdjustedChange | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    verdict: Verdict
    verdict_reason: str
    jobs_used: int
    jobs_left_out: int
    strata: int
    inconclusive: Inconclusive | None

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class Overlap:
    """Another rollout to the same component, scopes overlapping, inside a window (§6.4)."""

    id: int
    name: str
    at: datetime = field(metadata=zulu())

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class TrendDay:
    """One UTC day's ETT% of the treated and of the control jobs (None: no rows that day)."""

    day: date
    treated_ett_pct: float | None
    control_ett_pct: float | None


@dataclass(frozen=True)
class RolloutInfo:
    """The rollout an impact is of: the impact answer names it by these (its scope as the
    fields given); the page reads its notes, link and whether it was simulated."""

    id: int
    name: str
    component: str
    at: datetime = field(metadata=zulu())
    scope: Scope = field(metadata=shown_as(dict[str, Any], Scope.as_dict))
    notes: str = field(metadata=hidden())
    link: str = field(metadata=hidden())
    simulated: bool = field(metadata=hidden())

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class ImpactResult:
    """A rollout's measured impact: ETT_SPEC §6's fields (percentages not rounded) and the
    verdict, §6.1's ``component_effect``, §6.2's ``adjusted``, §6.4's ``overlapping`` and
    what an inconclusive verdict would take; the page also reads the per-job distributions
    and (optionally) the trend."""

    rollout: RolloutInfo
    window_days: int
    windows: Windows = field(metadata=inline("before", "after", "partial"))
    treated: GroupImpact
    control: GroupImpact | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    components: dict[str, ComponentShift]
    treated_before_ett: list[float] = field(metadata=hidden())
    treated_after_ett: list[float] = field(metadata=hidden())
    verdict: Verdict = field(metadata=shown_as(str))
    verdict_reason: str
    component_effect: ComponentEffect
    adjusted: AdjustedEffect
    overlapping: list[Overlap] = field(default_factory=list)
    inconclusive: Inconclusive | None = None
    trend: list[TrendDay] = field(default_factory=list, metadata=hidden())

    @property
    def has_jobs(self) -> bool:
        """Whether any treated job has a row in either window (else the page says so)."""
        return self.treated.jobs_before + self.treated.jobs_after > 0

    def moved_components(self, limit: int = 8) -> list[ComponentShift]:
        """Components whose lost share moved the most (either way), largest first."""
        moved = [c for c in self.components.values() if c.change_pts]
        return sorted(moved, key=lambda c: -abs(c.change_pts or 0.0))[:limit]

    @property
    def deciding_pts(self) -> float | None:
        """The unadjusted change the §6 verdict reads (the DiD's when it has an interval)."""
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    def as_api(self) -> dict[str, Any]:
        return as_api(self)
