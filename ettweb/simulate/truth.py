"""The true effect of each simulated rollout, from the simulation itself.

Why: an estimator's interval can only be held to coverage (ETT_SPEC §6.2) against a truth
that does not come from an estimator. The simulator knows which optimizations reached each
attempt, so the truth is a counterfactual: the rollout's treated jobs simulated again with
that one stage left out of the schedule. Every random draw of a job is taken whether or not
an optimization reached it (``ettweb.simulate.events``), so both runs meet the same failures
and jitters and differ by the stage alone.

The effect is the one a before/after comparison is after, measured where it happens: on the
treated jobs (in scope, with a day row in either §6 window), over the ``after`` window,

* ETT%: ETT%(with the stage) - ETT%(without it), in points;
* the rollout's component: its lost share (ETT_SPEC §6) with - without, in points.

A stage that reaches a job only at its next attempt, or a fleet-wide stage whose pilot got
there first, is diluted in the truth exactly as it is in the fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np

from ettweb.simulate.days import COMPONENTS, FleetDays, Progress, fleet_days
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import PlannedRollout


@dataclass(frozen=True)
class TrueEffect:
    """One stage's true effect over its treated jobs' ``after`` window (points)."""

    name: str
    component: str
    at: float
    window_days: int
    treated_jobs: int
    ett_pts: float | None
    component_pts: float | None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "component": self.component,
                "at": datetime.fromtimestamp(self.at, UTC).isoformat(),
                "window_days": self.window_days, "treated_jobs": self.treated_jobs,
                "ett_pts": self.ett_pts, "component_pts": self.component_pts}


def windows(at: float, window_days: int) -> tuple[tuple[date, date], tuple[date, date]]:
    """ETT_SPEC §6's before and after windows (inclusive UTC days) around ``at``."""
    day = datetime.fromtimestamp(at, UTC).date()
    return ((day - timedelta(days=window_days), day - timedelta(days=1)),
            (day + timedelta(days=1), day + timedelta(days=window_days)))


def in_scope(days: FleetDays, stage: PlannedRollout) -> np.ndarray:
    """Per job of ``days``: whether the stage's scope holds it."""
    return np.array([stage.reaches(job, model, team, cluster) for job, model, team, cluster
                     in zip(days.jobs, days.models, days.teams, days.clusters, strict=True)],
                    dtype=bool)


def _rows_between(days: FleetDays, span: tuple[date, date]) -> np.ndarray:
    return (days.day >= days.day_index(span[0])) & (days.day <= days.day_index(span[1]))


def treated_jobs(days: FleetDays, stage: PlannedRollout, window_days: int) -> np.ndarray:
    """Indices (into ``days.jobs``) of the stage's treated jobs: in scope, with a row in
    either window."""
    before, after = windows(stage.at, window_days)
    present = np.zeros(len(days.jobs), dtype=bool)
    present[days.job[_rows_between(days, before) | _rows_between(days, after)]] = True
    return np.flatnonzero(present & in_scope(days, stage))


def _after_sums(days: FleetDays, jobs: np.ndarray, after: tuple[date, date],
                column: int) -> tuple[float, float, float]:
    """(wall, productive, the component's lost) GPU-s of ``jobs``' rows in ``after``."""
    rows = _rows_between(days, after) & np.isin(days.job, jobs)
    return (float(days.wall[rows].sum()), float(days.productive[rows].sum()),
            float(days.lost[rows, column].sum()))


@dataclass(frozen=True)
class Counterfactual:
    """A stage's treated jobs (indices into the fleet's ``FleetDays``) and the same jobs
    simulated without the stage (``without``, in that order)."""

    stage: PlannedRollout
    treated: np.ndarray
    without: FleetDays


def counterfactual(plan: FleetPlan, schedule: Sequence[PlannedRollout], stage: PlannedRollout,
                   days: FleetDays, window_days: int = 14, *, job_indices: Sequence[int],
                   workers: int = 1, progress: Progress | None = None) -> Counterfactual:
    """The stage's treated jobs simulated again with the stage left out of ``schedule``;
    ``days`` is the fleet under the whole schedule and ``job_indices`` maps its job
    positions to the simulator's job indices."""
    treated = treated_jobs(days, stage, window_days)
    without = fleet_days(plan, [s for s in schedule if s != stage],
                         [job_indices[i] for i in treated], workers=workers, progress=progress)
    return Counterfactual(stage, treated, without)


def effect_of(days: FleetDays, world: Counterfactual, window_days: int = 14) -> TrueEffect:
    """The stage's true effect: its treated jobs with (``days``) and without it."""
    stage = world.stage
    _, after = windows(stage.at, window_days)
    column = COMPONENTS.index(stage.component) if stage.component in COMPONENTS else -1
    with_sums = _after_sums(days, world.treated, after, column)
    without_sums = _after_sums(world.without, np.arange(len(world.without.jobs)), after, column)
    ett = lost = None
    if with_sums[0] > 0 and without_sums[0] > 0:
        ett = 100.0 * (with_sums[1] / with_sums[0] - without_sums[1] / without_sums[0])
        if column >= 0:
            lost = 100.0 * (with_sums[2] / with_sums[0] - without_sums[2] / without_sums[0])
    return TrueEffect(stage.name, stage.component, stage.at, window_days, len(world.treated),
                      ett, lost)


def true_effect(plan: FleetPlan, schedule: Sequence[PlannedRollout], stage: PlannedRollout,
                days: FleetDays, window_days: int = 14, *, job_indices: Sequence[int],
                workers: int = 1, progress: Progress | None = None) -> TrueEffect:
    """The stage's true effect (:func:`counterfactual`, then :func:`effect_of`)."""
    world = counterfactual(plan, schedule, stage, days, window_days, job_indices=job_indices,
                           workers=workers, progress=progress)
    return effect_of(days, world, window_days)
