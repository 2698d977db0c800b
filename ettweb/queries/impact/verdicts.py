"""From a rollout's groups and draws to the result's numbers, intervals and verdicts.

The verdict is ours, not the spec's: ``improved`` when the deciding interval lies above 0,
``regressed`` when it lies below, otherwise ``inconclusive`` (for the rollout's own
component, ``reduced`` / ``increased``). The deciding interval is the
difference-in-differences one when the rollout has a control with an interval (it removes
what moved the whole fleet at the same time), else the treated change's. Every verdict that
is inconclusive also says what it would take to decide (:class:`~.result.Inconclusive`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Final

import numpy as np

from ettweb.attribution.components import component_of
from ettweb.components.known import known_components
from ettweb.queries.base import phase_components
from ettweb.queries.impact.draws import Draws
from ettweb.queries.impact.result import (
    ADJUSTED_METHOD,
    AdjustedChange,
    AdjustedEffect,
    ComponentEffect,
    ComponentShift,
    GroupImpact,
    Inconclusive,
    LostShare,
    Verdict,
)
from ettweb.queries.impact.windows import Windows
from ettweb.statistics import estimators
from ettweb.statistics.estimators import (
    MIN_JOBS_FOR_INTERVAL,
    Detectability,
    Group,
    Stratified,
    interval,
    ratio,
)


def group_impact(group: Group, draws: np.ndarray | None) -> GroupImpact:
    """A group's numbers, its interval from its bootstrap draws (None: too few jobs)."""
    totals = group.totals
    before, after = ratio(totals[1], totals[0]), ratio(totals[3], totals[2])
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = after / before - 1.0 if before else None
    return GroupImpact(group.jobs_before, group.jobs_after, before, after, change, relative,
                       interval(None if draws is None else draws[:, 0]))


def _lost_share(group: Group, draws: np.ndarray | None) -> LostShare:
    totals = group.totals
    return LostShare(ratio(totals[4], totals[0]), ratio(totals[5], totals[2]),
                     interval(None if draws is None else draws[:, 1]))


def per_job_ett(group: Group, *, after: bool) -> list[float]:
    """Each job's own ETT% in one window (jobs with wall time there)."""
    present, col = (group.in_after, 2) if after else (group.in_before, 0)
    rows = group.values[present]
    return [100.0 * p / w for w, p in zip(rows[:, col], rows[:, col + 1], strict=True)
            if w > 0]


def _deciding(did_ci: tuple[float, float] | None, treated_ci: tuple[float, float] | None,
              has_control: bool, treated: GroupImpact) -> tuple[tuple[float, float], str] | str:
    """The interval a verdict reads and its name, or the reason there is none."""
    if did_ci is not None:
        return did_ci, "difference-in-differences interval"
    if treated_ci is not None:
        what = "treated change interval"
        if has_control:
            what += " (the control has too few jobs for a DiD interval)"
        return treated_ci, what
    return (f"too few jobs: {treated.jobs_before} treated before, {treated.jobs_after} after "
            f"(an interval needs {MIN_JOBS_FOR_INTERVAL} in each window)")


_WORDS: Final[dict[str, dict[estimators.Direction, str]]] = {
    "ett": {"above": "improved", "below": "regressed", "contains": "inconclusive"},
    "lost": {"above": "increased", "below": "reduced", "contains": "inconclusive"},
}


def _decide(found: tuple[tuple[float, float], str] | str, words: str) -> tuple[str, str]:
    """A verdict from the deciding interval (ETT_SPEC §6.1's rule), and why."""
    if isinstance(found, str):
        return "inconclusive", found
    (low, high), what = found
    span = f"[{low:+.2f}, {high:+.2f}] pts"
    side = estimators.direction((low, high))
    place = {"above": "lies above 0", "below": "lies below 0", "contains": "contains 0"}[side]
    return _WORDS[words][side], f"the {what} {span} {place}"


def verdict_of(treated: GroupImpact, control: GroupImpact | None,
               did_ci: tuple[float, float] | None) -> tuple[Verdict, str]:
    """improved / regressed / inconclusive from the deciding interval, and why."""
    verdict, reason = _decide(_deciding(did_ci, treated.ci95_pts, control is not None,
                                        treated), "ett")
    return verdict, reason  # type: ignore[return-value]


def difference(treated: np.ndarray | None, control: np.ndarray | None) -> np.ndarray | None:
    """Draw by draw, treated - control (the DiD's draws); None unless both exist."""
    return None if treated is None or control is None else treated - control


def _detectability(draws: np.ndarray | None, estimate: float | None,
                   windows: Windows, window_days: int) -> Detectability | None:
    """What it takes, from the deciding draws; the window that holds the least data (a
    partial ``after``) is the one that limits the estimate."""
    if draws is None or estimate is None:
        return None
    days = min(window_days, windows.after_days) or 1
    return estimators.detectability(draws, estimate, days)


def inconclusive_of(verdict: str, draws: np.ndarray | None, estimate: float | None,
                    windows: Windows, window_days: int) -> Inconclusive | None:
    """What an inconclusive verdict would take (None for a decided one)."""
    if verdict != "inconclusive":
        return None
    days = min(window_days, windows.after_days) or 1
    return Inconclusive.of(_detectability(draws, estimate, windows, window_days), days)


def component_effect(component: str, treated: Group, control: Group | None, draws: Draws,
                     treated_impact: GroupImpact, windows: Windows,
                     window_days: int) -> ComponentEffect:
    """ETT_SPEC §6.1 from the §6 draws' second column."""
    t_share = _lost_share(treated, draws.treated)
    c_share = None if control is None else _lost_share(control, draws.control)
    did = did_ci = None
    did_draws = difference(draws.treated, draws.control)
    if c_share is not None and t_share.change_pts is not None \
            and c_share.change_pts is not None:
        did = t_share.change_pts - c_share.change_pts
    if did_draws is not None:
        did_ci = interval(did_draws[:, 1])
    verdict, reason = _decide(_deciding(did_ci, t_share.ci95_pts, control is not None,
                                        treated_impact), "lost")
    deciding = did_draws if did_ci is not None else draws.treated
    estimate = did if did_ci is not None else t_share.change_pts
    return ComponentEffect(
        component, t_share, c_share, did, did_ci, verdict, reason,  # type: ignore[arg-type]
        inconclusive_of(verdict, None if deciding is None else deciding[:, 1], estimate,
                        windows, window_days))


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def adjusted_effect(treated: Group, control: Group | None, draws: Draws,
                    treated_impact: GroupImpact, windows: Windows,
                    window_days: int) -> AdjustedEffect:
    """ETT_SPEC §6.2: the size-stratified change (``estimators``), its intervals and verdict.
    With a control too small for an interval, the treated change alone decides (as in §6)."""
    use_control = control if control is not None and draws.control is not None else None
    strata = Stratified.of(treated, use_control)
    point = estimators.adjusted_point(strata)
    adjusted = draws.adjusted
    columns = [None if adjusted is None else adjusted[:, k] for k in range(3)]
    t = AdjustedChange(_finite(point[0]), interval(columns[0]))
    c = did = did_ci = None
    if use_control is not None:
        c = AdjustedChange(_finite(point[1]), interval(columns[1]))
        did, did_ci = _finite(point[2]), interval(columns[2])
    elif control is not None:
        c = AdjustedChange(None, None)
    verdict, reason = _decide(_deciding(did_ci, t.ci95_pts, control is not None,
                                        treated_impact), "ett")
    deciding, estimate = (columns[2], did) if did_ci is not None else (columns[0],
                                                                        t.change_pts)
    dropped = 0 if use_control is None or strata.control is None else (
        len(use_control.values) - len(strata.control.values))
    left_out = dropped + estimators.left_out(strata) if treated.values.size else 0
    total = len(treated.values) + (0 if use_control is None else len(use_control.values))
    return AdjustedEffect(
        ADJUSTED_METHOD, t, c, did, did_ci, verdict, reason,  # type: ignore[arg-type]
        jobs_used=total - left_out, jobs_left_out=left_out, strata=strata.count,
        inconclusive=inconclusive_of(verdict, deciding, estimate, windows, window_days))


def component_shifts(lost: Mapping[bool, Mapping[str, float]], wall_before: float,
                     wall_after: float) -> dict[str, ComponentShift]:
    """Every component's lost share (points of wall time) before and after, sorted by name."""
    mapping = phase_components()
    grouped: dict[bool, dict[str, float]] = {False: defaultdict(float), True: defaultdict(float)}
    for after, categories in lost.items():
        for category, gpu_s in categories.items():
            grouped[after][component_of(category, mapping)] += gpu_s
    names = set(known_components()) | set(grouped[False]) | set(grouped[True])
    return {name: ComponentShift(name, ratio(grouped[False].get(name, 0.0), wall_before),
                                 ratio(grouped[True].get(name, 0.0), wall_after))
            for name in sorted(names)}
