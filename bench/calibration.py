"""``python -m bench.calibration``: are the rollout verdicts right as often as they claim?

On the simulated fleet of ``bench.rollouts`` (20,000 jobs over 180 days, seed 0), with the
estimators the impact query runs (:mod:`ettweb.statistics.estimators`):

1. **False positives.** Placebo rollouts (random moments, random scopes drawn from the
   fleet's real models, teams and clusters, a quarter fleet-wide, random components) on the
   **A/A fleet**: the same jobs simulated with nothing rolled out
   (``simulate_fleet --no-rollouts``). Any ``improved``/``regressed`` (``reduced``/
   ``increased``) there is wrong. Target ≤ 5% for the unadjusted, adjusted and component
   verdicts.
2. **Power.** Of the 14 planted rollouts, the share with the right conclusive verdict at 14
   days: ``reduced`` for the component (target ≥ 12 of 14), ``improved`` for the adjusted
   ETT% (≥ 10 of 14).
3. **Coverage.** The share of planted rollouts whose 95% interval holds the true effect
   (``ettweb.simulate.truth``: the treated jobs simulated again without the stage). Target
   ≥ 90% for the component and the adjusted ETT%.
4. **What it would take.** For each planted rollout the days its verdict actually took to
   become conclusive (the smallest window that decides it) against the days the
   inconclusive verdict at half that window predicted: within a factor 2.
5. **Unrecorded changes.** The level-shift detector (``ettweb.statistics.level_shifts``) on every
   component's daily lost share, fleet and per team: each planted step of 1 point or more
   found within 1 day; on the A/A fleet at most one change per series per 90 days.

Each share is printed with its binomial 95% interval (Wilson). The fleets are attributed
by the engine directly (``ettweb.simulate.days``): no database, so the whole run fits in
minutes on two cores. The last line of output is one JSON object; ``meets_targets`` says
whether every target above is met.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial
from typing import Any, Final

import numpy as np

from ettweb.simulate.days import COMPONENTS, FleetDays, fleet_days
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import PlannedRollout, rollout_schedule
from ettweb.simulate.series import SeriesKey, day_sums, lost_shares
from ettweb.simulate.truth import Counterfactual, counterfactual, effect_of, in_scope, windows
from ettweb.statistics import estimators
from ettweb.statistics.estimators import Group, Stratified
from ettweb.statistics.level_shifts import PENALTY, Shift, find_shifts

FPR_TARGET: Final = 0.05
COVERAGE_TARGET: Final = 0.90
POWER_COMPONENT_TARGET: Final = 12
POWER_ADJUSTED_TARGET: Final = 10
WINDOW_DAYS: Final = 14
#: The longest window scanned for the days a verdict took.
MAX_SCAN_DAYS: Final = 28
#: Placebo scopes: the fleet, or one model, team or cluster, each a quarter of the time.
SCOPE_KINDS: Final = ("fleet", "models", "teams", "clusters")
#: Components a placebo names (``unknown`` owns only gaps in instrumentation).
PLACEBO_COMPONENTS: Final = tuple(c for c in COMPONENTS if c != "unknown")
#: Z of a two-sided 95% Wilson interval.
Z95: Final = 1.959964
#: An end date that never moves, so two runs simulate the same fleet.
FLEET_END: Final = date(2026, 11, 30)


def _say(text: str) -> None:
    print(f"[bench.calibration] {text}", file=sys.stderr, flush=True)


def wilson(hits: int, trials: int) -> tuple[float, float]:
    """The Wilson score 95% interval of ``hits`` / ``trials`` (good near 0 and 1)."""
    if trials == 0:
        return (0.0, 1.0)
    p = hits / trials
    centre = (p + Z95 ** 2 / (2 * trials)) / (1 + Z95 ** 2 / trials)
    half = Z95 * math.sqrt(p * (1 - p) / trials + Z95 ** 2 / (4 * trials ** 2)) / (
        1 + Z95 ** 2 / trials)
    return (max(0.0, centre - half), min(1.0, centre + half))


def share(hits: int, trials: int) -> dict[str, Any]:
    low, high = wilson(hits, trials)
    return {"hits": hits, "trials": trials, "share": hits / trials if trials else None,
            "ci95": [round(low, 4), round(high, 4)]}


# --------------------------------------------------------------------------- one impact

def groups(days: FleetDays, at: float, scope: np.ndarray, component: str,
           window_days: int) -> tuple[Group, Group | None]:
    """The treated and control groups of a rollout at ``at`` (ETT_SPEC §6's windows), from
    the fleet's per-job-day sums, with ``component``'s lost time in the last two columns."""
    before, after = windows(at, window_days)
    b0, b1, a0, a1 = (days.day_index(d) for d in (*before, *after))
    rows_before = (days.day >= b0) & (days.day <= b1)
    rows_after = (days.day >= a0) & (days.day <= a1)
    column = COMPONENTS.index(component)
    n = len(days.jobs)
    values = np.zeros((n, 6))
    present = np.zeros((n, 2), dtype=bool)
    for k, rows in enumerate((rows_before, rows_after)):
        jobs = days.job[rows]
        np.add.at(values[:, 2 * k], jobs, days.wall[rows])
        np.add.at(values[:, 2 * k + 1], jobs, days.productive[rows])
        np.add.at(values[:, 4 + k], jobs, days.lost[rows, column])
        present[jobs, k] = True
    seen = present.any(axis=1)
    fleet = Group(values[seen], present[seen, 0], present[seen, 1], days.gpus[seen])
    held = scope[seen]
    return fleet.take(held), (None if held.all() else fleet.take(~held))


#: An adjusted estimator under calibration: (treated, control, generator) → (the deciding
#: point estimate, its draws). The real one is :func:`stratified`; tests pass broken ones.
Adjuster = Callable[[Group, Group | None, np.random.Generator], tuple[float, np.ndarray]]


def stratified(treated: Group, control: Group | None,
               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The product's adjusted estimate (ETT_SPEC §6.2): the DiD with a control, else the
    treated change."""
    s = Stratified.of(treated, control)
    column = 2 if control is not None else 0
    return (float(estimators.adjusted_point(s)[column]),
            estimators.adjusted_draws(s, rng)[:, column])


@dataclass(frozen=True)
class Call:
    """One verdict: the deciding estimate, its interval and its draws."""

    estimate: float | None
    ci: tuple[float, float] | None
    draws: np.ndarray | None

    def side(self) -> str:
        return "none" if self.ci is None else estimators.direction(self.ci)


@dataclass(frozen=True)
class Calls:
    unadjusted: Call
    adjusted: Call
    component: Call


def _point(treated: Group, control: Group | None, change: Callable[[np.ndarray], Any]) -> float:
    value = float(change(treated.totals))
    if control is not None:
        value -= float(change(control.totals))
    return value


def evaluate(treated: Group, control: Group | None, seed: int,
             adjuster: Adjuster = stratified) -> Calls:
    """The three verdicts' deciding numbers as the impact query computes them: §6's
    draws for ETT% and the component (one generator, treated then control), then the
    adjusted estimate's; the DiD decides when both groups have draws."""
    rng = np.random.default_rng(seed)
    t = estimators.bootstrap(treated.values, rng) if treated.enough_jobs else None
    c = estimators.bootstrap(control.values, rng) \
        if control is not None and control.enough_jobs else None
    if t is None:
        none = Call(None, None, None)
        return Calls(none, none, none)
    use = control if c is not None else None
    deciding = t - c if c is not None else t
    point_ett = _point(treated, use, estimators.ett_change)
    point_lost = _point(treated, use, estimators.lost_change)
    adjusted_point, adjusted_draws = adjuster(treated, use, rng)
    return Calls(
        Call(point_ett, estimators.interval(deciding[:, 0]), deciding[:, 0]),
        Call(adjusted_point, estimators.interval(adjusted_draws), adjusted_draws),
        Call(point_lost, estimators.interval(deciding[:, 1]), deciding[:, 1]))


# --------------------------------------------------------------------------- placebos

@dataclass
class Placebos:
    """False positives of each verdict on the A/A fleet."""

    count: int = 0
    unadjusted: int = 0
    adjusted: int = 0
    component: int = 0
    too_few: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"placebos": self.count, "too_few_jobs": self.too_few,
                "unadjusted": share(self.unadjusted, self.count),
                "adjusted": share(self.adjusted, self.count),
                "component": share(self.component, self.count)}


def placebo_scope(days: FleetDays, rng: random.Random) -> tuple[str, np.ndarray]:
    kind = rng.choice(SCOPE_KINDS)
    if kind == "fleet":
        return "whole fleet", np.ones(len(days.jobs), dtype=bool)
    labels = {"models": days.models, "teams": days.teams, "clusters": days.clusters}[kind]
    value = rng.choice(sorted(set(labels)))
    return f"{kind} {value}", np.array([label == value for label in labels], dtype=bool)


def run_placebos(plan: FleetPlan, days: FleetDays, count: int, seed: int,
                 adjuster: Adjuster = stratified) -> Placebos:
    """``count`` placebo rollouts at random moments whose windows fit in the fleet."""
    rng = random.Random(seed)
    out = Placebos()
    for n in range(count):
        day = rng.randint(WINDOW_DAYS + 1, plan.days - WINDOW_DAYS - 2)
        at = plan.start_ts + day * 86_400.0 + rng.uniform(0.0, 86_400.0)
        _, scope = placebo_scope(days, rng)
        treated, control = groups(days, at, scope, rng.choice(PLACEBO_COMPONENTS),
                                  WINDOW_DAYS)
        calls = evaluate(treated, control, seed * 100_000 + n, adjuster)
        out.count += 1
        out.too_few += calls.unadjusted.ci is None
        out.unadjusted += calls.unadjusted.side() in ("above", "below")
        out.adjusted += calls.adjusted.side() in ("above", "below")
        out.component += calls.component.side() in ("above", "below")
    return out


# --------------------------------------------------------------------------- planted

@dataclass
class Planted:
    """One planted rollout: its truth, its 14-day calls, and the days its verdicts took."""

    name: str
    true_ett_pts: float | None
    true_component_pts: float | None
    calls: Calls
    took_days: dict[str, int | None] = field(default_factory=dict)
    #: ``"<verdict>@<window>"`` -> the days the inconclusive verdict at that window predicted
    predicted_days: dict[str, int | None] = field(default_factory=dict)
    #: The same prediction with the true effect in place of the estimate: what the method
    #: would say if the early estimate were exact (the noise of the estimate left out).
    oracle_days: dict[str, int | None] = field(default_factory=dict)

    def covered(self, which: str) -> bool:
        call = getattr(self.calls, which)
        truth = self.true_component_pts if which == "component" else self.true_ett_pts
        return call.ci is not None and truth is not None and call.ci[0] <= truth <= call.ci[1]

    def right(self, which: str) -> bool:
        return getattr(self.calls, which).side() == ("below" if which == "component"
                                                     else "above")

    def as_dict(self) -> dict[str, Any]:
        def rounded(call: Call) -> dict[str, Any]:
            return {"estimate": None if call.estimate is None else round(call.estimate, 3),
                    "ci95": None if call.ci is None else [round(x, 3) for x in call.ci],
                    "verdict_side": call.side()}

        return {"name": self.name, "true_ett_pts": _r(self.true_ett_pts),
                "true_component_pts": _r(self.true_component_pts),
                "adjusted": rounded(self.calls.adjusted),
                "component": rounded(self.calls.component),
                "unadjusted": rounded(self.calls.unadjusted),
                "covered": {k: self.covered(k) for k in ("adjusted", "component")},
                "took_days": self.took_days, "predicted_days": self.predicted_days,
                "oracle_days": self.oracle_days}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _call_at(days: FleetDays, stage: PlannedRollout, scope: np.ndarray, window: int,
             seed: int, adjuster: Adjuster) -> Calls:
    treated, control = groups(days, stage.at, scope, stage.component, window)
    return evaluate(treated, control, seed, adjuster)


DaysByKey = dict[str, int | None]


def days_taken(days: FleetDays, stage: PlannedRollout, scope: np.ndarray, seed: int,
               adjuster: Adjuster, truths: dict[str, float | None] | None = None,
               ) -> tuple[DaysByKey, DaysByKey, DaysByKey]:
    """Per verdict (adjusted, component): the smallest window (days) whose verdict is
    right and conclusive, the days each inconclusive verdict before it predicted, and the
    same prediction made with the true effect (``truths``) instead of the estimate."""
    calls = {w: _call_at(days, stage, scope, w, seed, adjuster)
             for w in range(1, MAX_SCAN_DAYS + 1)}
    took: DaysByKey = {}
    predicted: DaysByKey = {}
    oracle: DaysByKey = {}
    for which, side in (("adjusted", "above"), ("component", "below")):
        first = next((w for w, c in calls.items() if getattr(c, which).side() == side), None)
        took[which] = first
        if first is None:
            continue
        for window in range(1, first):
            early = getattr(calls[window], which)
            if early.side() != "contains" or early.draws is None or early.estimate is None:
                continue
            found = estimators.detectability(early.draws, early.estimate, window)
            if found is not None:
                predicted[f"{which}@{window}"] = found.days_needed
            truth = (truths or {}).get(which)
            exact = (estimators.detectability(early.draws, truth, window)
                     if truth is not None else None)
            if exact is not None:
                oracle[f"{which}@{window}"] = exact.days_needed
    return took, predicted, oracle


def counterfactuals(plan: FleetPlan, schedule: Sequence[PlannedRollout], days: FleetDays,
                    workers: int = 2) -> list[Counterfactual]:
    """Every stage's treated jobs simulated again without it (the unrecorded one too)."""
    worlds = []
    for n, stage in enumerate(schedule):
        worlds.append(counterfactual(plan, schedule, stage, days, WINDOW_DAYS,
                                     job_indices=range(plan.jobs), workers=workers))
        _say(f"counterfactual {n + 1}/{len(schedule)}: {stage.name}: "
             f"{len(worlds[-1].treated):,} treated jobs")
    return worlds


def run_planted(worlds: Sequence[Counterfactual], days: FleetDays,
                adjuster: Adjuster = stratified, *, scan: bool = True) -> list[Planted]:
    """The recorded stages' truths and calls (an unrecorded stage has no verdict)."""
    out = []
    for n, world in enumerate(w for w in worlds if w.stage.recorded):
        stage = world.stage
        truth = effect_of(days, world, WINDOW_DAYS)
        scope = in_scope(days, stage)
        planted = Planted(stage.name, truth.ett_pts, truth.component_pts,
                          _call_at(days, stage, scope, WINDOW_DAYS, 1_000 + n, adjuster))
        if scan:
            planted.took_days, planted.predicted_days, planted.oracle_days = days_taken(
                days, stage, scope, 1_000 + n, adjuster,
                {"adjusted": truth.ett_pts, "component": truth.component_pts})
        out.append(planted)
        _say(f"planted {n + 1}: {stage.name}: true ETT {_r(truth.ett_pts)}, component "
             f"{_r(truth.component_pts)}; adjusted {planted.calls.adjusted.ci}, component "
             f"{planted.calls.component.ci}")
    return out


def within_factor_two(planted: Sequence[Planted], *, at_half: bool,
                      oracle: bool = False) -> dict[str, Any]:
    """The predictions within a factor 2 of the days taken: those made at half the days it
    took (``at_half``), or at every inconclusive window before it; ``oracle``: the
    predictions made with the true effect."""
    pairs = []
    for p in planted:
        for key, guess in (p.oracle_days if oracle else p.predicted_days).items():
            which, window = key.split("@")
            took = p.took_days.get(which)
            if took is None or (at_half and int(window) != max(1, took // 2)):
                continue
            pairs.append((guess, took))
    hits = sum(1 for guess, took in pairs if guess is not None and took / 2 <= guess <= 2 * took)
    return share(hits, len(pairs))


# --------------------------------------------------------------------------- level shifts

#: ETT_SPEC §6.3: a planted step this large (points of the series' wall time) or larger is
#: found within STEP_DAYS of its true day, ...
MIN_STEP_PTS: Final = 1.0
STEP_DAYS: Final = 1
#: ... and a flat series shows at most one change in any FLAT_DAYS days.
FLAT_DAYS: Final = 90
#: Penalties swept beside the product's (``level_shifts.PENALTY``), to show how it was chosen.
PENALTIES: Final = (5.0, 10.0, 15.0, 25.0, 40.0, 60.0)
#: A change on the planted fleet is explained when a stage of its component lands this
#: close (the product matches recorded rollouts at this distance too).
EXPLAINED_DAYS: Final = 2

Detector = Callable[[np.ndarray], list[Shift]]


@dataclass(frozen=True)
class Step:
    """A planted stage's step in one series: the mean over its 14 days after of the series
    with the stage less the series without it (the counterfactual), in points."""

    stage: str
    recorded: bool
    component: str
    team: str | None
    #: The true day, counted from the fleet's first day: the first whole UTC day after the
    #: deploy (the first of §6's after window). The deploy's own day is part-way: jobs
    #: take a stage as they start, and it lands during a working day.
    day: int
    size_pts: float

    def found_in(self, shifts: Sequence[Shift]) -> bool:
        return any(abs(s.index - self.day) <= STEP_DAYS
                   and np.sign(s.change_pts) == np.sign(self.size_pts) for s in shifts)


def planted_steps(days: FleetDays, worlds: Sequence[Counterfactual], n_days: int) -> list[Step]:
    """Every (stage, series) whose true step is at least :data:`MIN_STEP_PTS`."""
    base = day_sums(days, n_days)
    teams = tuple(t for t in base.groups if t is not None)
    shares = lost_shares(base)
    steps = []
    for world in worlds:
        stage = world.stage
        without = lost_shares(base - day_sums(days, n_days, teams, world.treated)
                              + day_sums(world.without, n_days, teams))
        day = days.day_index(datetime.fromtimestamp(stage.at, UTC).date()) + 1
        after = slice(day, day + WINDOW_DAYS)
        for team in base.groups:
            key = (stage.component, team)
            if key not in shares:
                continue
            other = without.get(key, np.zeros(n_days))
            with np.errstate(invalid="ignore"):
                size = float(np.nanmean(shares[key][after] - other[after]))
            if abs(size) >= MIN_STEP_PTS:
                steps.append(Step(stage.name, stage.recorded, stage.component, team, day,
                                  size))
    return steps


def most_in_window(shifts: Sequence[Shift], days: int = FLAT_DAYS) -> int:
    """The most changes any ``days`` consecutive days of one series hold."""
    at = sorted(s.index for s in shifts)
    return max((sum(1 for b in at[i:] if b - a < days) for i, a in enumerate(at)), default=0)


def unexplained(found: dict[SeriesKey, list[Shift]], worlds: Sequence[Counterfactual],
                first: date) -> list[dict[str, Any]]:
    """Changes on the planted fleet no stage of their component explains (the stage
    within :data:`EXPLAINED_DAYS`): a detector's false alarms where things do move."""
    days = {(w.stage.component, (datetime.fromtimestamp(w.stage.at, UTC).date() - first).days)
            for w in worlds}
    return [{"component": c, "team": t, "day": s.index, "change_pts": round(s.change_pts, 3)}
            for (c, t), shifts in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
            for s in shifts
            if not any(c == comp and abs(s.index - d) <= EXPLAINED_DAYS for comp, d in days)]


def search(series: dict[SeriesKey, np.ndarray], detector: Detector) -> dict[SeriesKey, list[Shift]]:
    return {key: detector(values) for key, values in series.items()}


def judge_changes(steps: Sequence[Step], planted: dict[SeriesKey, list[Shift]],
                  flat: dict[SeriesKey, list[Shift]]) -> dict[str, Any]:
    """Found steps and the flat series' worst 90 days, for one detector."""
    hits = [step.found_in(planted.get((step.component, step.team), [])) for step in steps]
    worst = max((most_in_window(s) for s in flat.values()), default=0)
    return {"steps_found": share(sum(hits), len(steps)),
            "flat_series": len(flat), "flat_changes": sum(len(s) for s in flat.values()),
            "flat_most_in_90_days": worst}


def calibrate_changes(days: FleetDays, null_days: FleetDays, worlds: Sequence[Counterfactual],
                      n_days: int, detector: Detector = find_shifts, *,
                      sweep: bool = True) -> dict[str, Any]:
    """ETT_SPEC §6.3's two targets for ``detector`` on every component's daily lost share,
    fleet and per team: each planted step of 1 point or more found within 1 day, and the
    A/A fleet's series at most one change per 90 days; then (``sweep``) the same for the
    product's detector at each of :data:`PENALTIES`."""
    steps = planted_steps(days, worlds, n_days)
    planted_series = lost_shares(day_sums(days, n_days))
    flat_series = lost_shares(day_sums(null_days, n_days))
    planted, flat = search(planted_series, detector), search(flat_series, detector)
    result = judge_changes(steps, planted, flat)
    missed = [step for step in steps if not step.found_in(planted.get((step.component,
                                                                        step.team), []))]
    unrecorded = [step for step in steps if not step.recorded]
    result.update({
        "steps": [{"stage": s.stage, "component": s.component, "team": s.team, "day": s.day,
                   "size_pts": round(s.size_pts, 3), "found": s not in missed,
                   "found_days": [x.index for x in planted.get((s.component, s.team), [])
                                  if abs(x.index - s.day) <= 3]} for s in steps],
        "unrecorded_found": share(sum(s not in missed for s in unrecorded), len(unrecorded)),
        "unexplained_on_planted_fleet": unexplained(planted, worlds, days.first),
        "penalty": PENALTY,
        "sweep": {str(p): judge_changes(
            steps, search(planted_series, partial(find_shifts, penalty=p)),
            search(flat_series, partial(find_shifts, penalty=p)))
            for p in (PENALTIES if sweep else ())},
    })
    result["checks"] = {
        "changes_steps_found": bool(steps) and not missed,
        "changes_unrecorded_found": bool(unrecorded) and not set(unrecorded) & set(missed),
        "changes_flat_at_most_one_per_90_days": result["flat_most_in_90_days"] <= 1,
    }
    return result


# --------------------------------------------------------------------------- report

def summary(placebos: Placebos, planted: Sequence[Planted],
            changes: dict[str, Any] | None) -> dict[str, Any]:
    n = len(planted)
    power = {k: share(sum(p.right(k) for p in planted), n) for k in ("adjusted", "component")}
    coverage = {k: share(sum(p.covered(k) for p in planted), n)
                for k in ("adjusted", "component")}
    fp = placebos.as_dict()
    factor = {"at_half_the_days": within_factor_two(planted, at_half=True),
              "at_every_inconclusive_window": within_factor_two(planted, at_half=False),
              "with_the_true_effect_at_half_the_days": within_factor_two(
                  planted, at_half=True, oracle=True)}
    checks = {
        "fpr_unadjusted": fp["unadjusted"]["share"] <= FPR_TARGET,
        "fpr_adjusted": fp["adjusted"]["share"] <= FPR_TARGET,
        "fpr_component": fp["component"]["share"] <= FPR_TARGET,
        "power_component": power["component"]["hits"] >= POWER_COMPONENT_TARGET,
        "power_adjusted": power["adjusted"]["hits"] >= POWER_ADJUSTED_TARGET,
        "coverage_component": (coverage["component"]["share"] or 0) >= COVERAGE_TARGET,
        "coverage_adjusted": (coverage["adjusted"]["share"] or 0) >= COVERAGE_TARGET,
        "days_within_factor_2": factor["at_half_the_days"]["trials"] > 0
        and factor["at_half_the_days"]["hits"] == factor["at_half_the_days"]["trials"],
    }
    if changes is not None:
        checks.update(changes["checks"])
    return {"false_positives": fp, "power": power, "coverage": coverage,
            "days_needed_within_factor_2": factor, "changes": changes, "checks": checks,
            "meets_targets": all(checks.values()),
            "planted": [p.as_dict() for p in planted]}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    began = time.perf_counter()
    plan = FleetPlan(seed=args.seed, days=args.days, jobs=args.jobs, end=FLEET_END)
    schedule = rollout_schedule(plan)
    _say(f"attributing the planted fleet ({args.jobs:,} jobs, {args.days} days)…")
    planted_days = fleet_days(plan, schedule, workers=args.workers)
    _say("attributing the A/A fleet (nothing rolled out)…")
    null_days = fleet_days(plan, (), workers=args.workers)
    _say(f"{args.placebos} placebo rollouts on the A/A fleet…")
    placebos = run_placebos(plan, null_days, args.placebos, args.seed + 1)
    _say("counterfactuals: each stage's treated jobs without it…")
    worlds = counterfactuals(plan, schedule, planted_days, workers=args.workers)
    _say("planted rollouts: truths, 14-day verdicts, days taken…")
    planted = run_planted(worlds, planted_days, scan=not args.no_scan)
    changes = None
    if not args.no_changes:
        _say("level shifts: planted steps and flat series…")
        changes = calibrate_changes(planted_days, null_days, worlds, args.days)
    result = summary(placebos, planted, changes)
    return {"benchmark": "calibration", "jobs": args.jobs, "days": args.days,
            "seed": args.seed, "window_days": WINDOW_DAYS, **result,
            "targets": {"fpr": FPR_TARGET, "coverage": COVERAGE_TARGET,
                        "power_component": POWER_COMPONENT_TARGET,
                        "power_adjusted": POWER_ADJUSTED_TARGET},
            "seconds": round(time.perf_counter() - began, 1), "commit": _commit(),
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="simulated jobs (20,000)")
    parser.add_argument("--days", type=int, default=180, help="days they cover (180)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (0)")
    parser.add_argument("--placebos", type=int, default=300,
                        help="placebo rollouts on the A/A fleet (300)")
    parser.add_argument("--workers", type=int, default=2, help="processes attributing (2)")
    parser.add_argument("--no-scan", action="store_true",
                        help="skip the days-taken scan (windows 1-28 of each rollout)")
    parser.add_argument("--no-changes", action="store_true",
                        help="skip the level-shift calibration")
    args = parser.parse_args(argv)
    if args.jobs < 100 or not 60 <= args.days <= 3650 or args.placebos < 1:
        parser.error("--jobs at least 100, --days 60-3650, --placebos at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
