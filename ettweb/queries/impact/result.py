"""The impact query and its result (ETT_SPEC §6, §6.1, §6.2, §6.4): frozen types, and the
JSON the API answers.

The types hold numbers already worked out (:mod:`ettweb.queries.impact.verdicts` fills them)
so that a page, the API, the weekly report and the stored headline all read one result and
cannot disagree on a field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Final, Literal

from ettweb.platform.text import iso_utc
from ettweb.queries.impact.windows import Windows
from ettweb.queries.registry import Query
from ettweb.rollouts.scope import Scope
from ettweb.statistics import estimators
from ettweb.statistics.estimators import MIN_JOBS_FOR_INTERVAL, Detectability, as_pair

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
        return {"jobs_before": self.jobs_before, "jobs_after": self.jobs_after,
                "before_ett_pct": self.before_ett_pct, "after_ett_pct": self.after_ett_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel,
                "ci95_pts": list(self.ci95_pts) if self.ci95_pts else None}


@dataclass(frozen=True)
class ComponentShift:
    """One component's lost share of the treated jobs' wall time, in points, per window."""

    component: str
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
        return {"before_lost_pct": self.before_lost_pct, "after_lost_pct": self.after_lost_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel}


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
        return {"mde_pts": self.mde_pts, "days_needed": self.days_needed,
                "more_days": self.more_days}


@dataclass(frozen=True)
class LostShare:
    """One group's lost share of the rollout's component (ETT_SPEC §6.1), in points."""

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
        return {"before_lost_pct": self.before_lost_pct, "after_lost_pct": self.after_lost_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel,
                "ci95_pts": as_pair(self.ci95_pts)}


@dataclass(frozen=True)
class ComponentEffect:
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

    @property
    def deciding_pts(self) -> float | None:
        """The change the verdict reads: the DiD's when it has an interval."""
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    @property
    def deciding_ci95_pts(self) -> tuple[float, float] | None:
        return self.did_ci95_pts if self.did_ci95_pts is not None else self.treated.ci95_pts

    def as_api(self) -> dict[str, Any]:
        return {"component": self.component, "treated": self.treated.as_api(),
                "control": self.control.as_api() if self.control else None,
                "did_pts": self.did_pts, "did_ci95_pts": as_pair(self.did_ci95_pts),
                "verdict": self.verdict, "verdict_reason": self.verdict_reason,
                "inconclusive": self.inconclusive.as_api() if self.inconclusive else None}


@dataclass(frozen=True)
class AdjustedChange:
    """One group's adjusted ETT% change and its interval."""

    change_pts: float | None
    ci95_pts: tuple[float, float] | None

    def as_api(self) -> dict[str, Any]:
        return {"change_pts": self.change_pts, "ci95_pts": as_pair(self.ci95_pts)}


@dataclass(frozen=True)
class AdjustedEffect:
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

    @property
    def deciding_pts(self) -> float | None:
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    @property
    def deciding_ci95_pts(self) -> tuple[float, float] | None:
        return self.did_ci95_pts if self.did_ci95_pts is not None else self.treated.ci95_pts

    def as_api(self) -> dict[str, Any]:
        return {"method": self.method, "treated": self.treated.as_api(),
                "control": self.control.as_api() if self.control else None,
                "did_pts": self.did_pts, "did_ci95_pts": as_pair(self.did_ci95_pts),
                "verdict": self.verdict, "verdict_reason": self.verdict_reason,
                "jobs_used": self.jobs_used, "jobs_left_out": self.jobs_left_out,
                "strata": self.strata,
                "inconclusive": self.inconclusive.as_api() if self.inconclusive else None}


@dataclass(frozen=True)
class Overlap:
    """Another rollout to the same component, scopes overlapping, inside a window (§6.4)."""

    id: int
    name: str
    at: datetime

    def as_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "at": iso_utc(self.at)}


@dataclass(frozen=True)
class TrendDay:
    """One UTC day's ETT% of the treated and of the control jobs (None: no rows that day)."""

    day: date
    treated_ett_pct: float | None
    control_ett_pct: float | None


@dataclass(frozen=True)
class RolloutInfo:
    id: int
    name: str
    component: str
    at: datetime
    scope: Scope
    notes: str
    link: str
    simulated: bool

    def as_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "component": self.component,
                "at": iso_utc(self.at), "scope": self.scope.as_dict()}


@dataclass(frozen=True)
class ImpactResult:
    """Every §6 field, plus the verdict, the per-job distributions and (optionally) the trend."""

    rollout: RolloutInfo
    window_days: int
    windows: Windows
    treated: GroupImpact
    control: GroupImpact | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    components: dict[str, ComponentShift]
    treated_before_ett: list[float]
    treated_after_ett: list[float]
    verdict: Verdict
    verdict_reason: str
    component_effect: ComponentEffect
    adjusted: AdjustedEffect
    overlapping: list[Overlap] = field(default_factory=list)
    inconclusive: Inconclusive | None = None
    trend: list[TrendDay] = field(default_factory=list)

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
        """The JSON of ETT_SPEC §6 (percentages not rounded), plus the verdict, §6.1's
        ``component_effect``, §6.2's ``adjusted``, §6.4's ``overlapping`` and, for an
        inconclusive verdict, what it would take."""
        w = self.windows
        return {
            "rollout": self.rollout.as_api(), "window_days": self.window_days,
            "before": [w.before[0].isoformat(), w.before[1].isoformat()],
            "after": [w.after[0].isoformat(), w.after[1].isoformat()] if w.after else None,
            "partial": w.partial, "treated": self.treated.as_api(),
            "control": self.control.as_api() if self.control else None,
            "did_pts": self.did_pts,
            "did_ci95_pts": list(self.did_ci95_pts) if self.did_ci95_pts else None,
            "components": {name: shift.as_api() for name, shift in self.components.items()},
            "verdict": self.verdict, "verdict_reason": self.verdict_reason,
            "inconclusive": self.inconclusive.as_api() if self.inconclusive else None,
            "component_effect": self.component_effect.as_api(),
            "adjusted": self.adjusted.as_api(),
            "overlapping": [overlap.as_api() for overlap in self.overlapping],
        }
