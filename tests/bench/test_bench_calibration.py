"""``bench.calibration`` can fail: a broken estimator calibrated on a small A/A fleet shows
its false positives, while the product's estimator there stays near its 5%."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from bench import calibration
from ettweb.simulate.days import fleet_days
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import rollout_schedule
from ettweb.simulate.truth import Counterfactual, counterfactual
from ettweb.statistics.estimators import Group
from ettweb.statistics.level_shifts import Shift, find_shifts

PLAN = FleetPlan(seed=3, days=60, jobs=1500, end=date(2026, 6, 30))


@pytest.fixture(scope="module")
def null_fleet() -> calibration.FleetDays:
    return fleet_days(PLAN, ())


def overconfident(treated: Group, control: Group | None,
                  rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The real estimate with an interval a quarter as wide: it ignores most of the
    between-job spread, as an estimator treating days as independent would."""
    point, draws = calibration.stratified(treated, control, rng)
    return point, point + (draws - np.nanmean(draws)) / 4


def ignores_control(treated: Group, control: Group | None,
                    rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The treated change alone, even when a control exists, and its interval a third as
    wide: what moved the whole fleet is credited to the rollout."""
    point, draws = calibration.stratified(treated, None, rng)
    return point, point + (draws - np.nanmean(draws)) / 3


@pytest.mark.slow
def test_a_broken_estimator_fails_its_false_positive_target(
        null_fleet: calibration.FleetDays) -> None:
    real = calibration.run_placebos(PLAN, null_fleet, 40, seed=5)
    broken = calibration.run_placebos(PLAN, null_fleet, 40, seed=5, adjuster=overconfident)
    assert real.count == broken.count == 40
    assert real.unadjusted == broken.unadjusted  # the same placebos, the same §6 draws
    assert broken.adjusted / broken.count > calibration.FPR_TARGET
    assert broken.adjusted > real.adjusted
    other = calibration.run_placebos(PLAN, null_fleet, 40, seed=5, adjuster=ignores_control)
    assert other.adjusted / other.count > calibration.FPR_TARGET


def test_groups_split_the_fleet_by_scope_and_window(
        null_fleet: calibration.FleetDays) -> None:
    at = PLAN.start_ts + 30 * 86_400.0 + 3600.0
    scope = np.array([team == "ads" for team in null_fleet.teams])
    treated, control = calibration.groups(null_fleet, at, scope, "checkpointing", 7)
    assert control is not None
    assert treated.jobs_before > 5 and control.jobs_after > 5
    # Every job kept has wall time in a window, and lost time never exceeds wall time.
    for group in (treated, control):
        assert np.all(group.values[:, 0] + group.values[:, 2] > 0)
        assert np.all(group.values[:, 4] <= group.values[:, 0] + 1e-6)
    fleet, none = calibration.groups(null_fleet, at, np.ones(len(scope), dtype=bool),
                                     "checkpointing", 7)
    assert none is None and len(fleet.values) == len(treated.values) + len(control.values)


def test_wilson_interval() -> None:
    low, high = calibration.wilson(6, 300)
    assert 0.009 < low < 0.02 < high < 0.045
    assert calibration.wilson(0, 10)[0] == 0.0
    assert calibration.wilson(0, 0) == (0.0, 1.0)


# --------------------------------------------------------------------------- level shifts

@pytest.fixture(scope="module")
def planted_fleet() -> tuple[calibration.FleetDays, list[Counterfactual]]:
    """The fleet, and the counterfactuals of its pilots and its unrecorded stage (the
    fleet-wide stages' would simulate every job again, for no new kind of step)."""
    schedule = rollout_schedule(PLAN)
    days = fleet_days(PLAN, schedule)
    return days, [counterfactual(PLAN, schedule, stage, days, job_indices=range(PLAN.jobs))
                  for stage in schedule if stage.stage == 1]


def _late(shifts: list[Shift]) -> list[Shift]:
    return [Shift(s.index + 3, s.before_pct, s.after_pct) for s in shifts]


@pytest.mark.slow
def test_a_broken_change_detector_fails_its_targets(
        null_fleet: calibration.FleetDays,
        planted_fleet: tuple[calibration.FleetDays, list[Counterfactual]]) -> None:
    """The real detector finds no change on the A/A fleet; one with no penalty to speak of
    finds several per series, one that finds nothing misses every step, one three days
    late misses them too."""
    days, worlds = planted_fleet
    real = calibration.calibrate_changes(days, null_fleet, worlds, PLAN.days, sweep=False)
    assert real["checks"]["changes_flat_at_most_one_per_90_days"]
    steps = real["steps_found"]
    assert steps["trials"] >= 3 and steps["hits"] >= 1  # a thin fleet: not all, some
    assert {s["stage"] for s in real["steps"]} >= {
        w.stage.name for w in worlds if not w.stage.recorded}  # the unrecorded one has a step

    def jumpy(values: np.ndarray) -> list[Shift]:
        return find_shifts(values, penalty=0.5, alpha=0.5, min_shift_pts=0.0)

    broken = calibration.calibrate_changes(days, null_fleet, worlds, PLAN.days, jumpy,
                                          sweep=False)
    assert not broken["checks"]["changes_flat_at_most_one_per_90_days"]
    assert broken["flat_most_in_90_days"] > 1
    blind = calibration.calibrate_changes(days, null_fleet, worlds, PLAN.days, lambda v: [],
                                         sweep=False)
    assert blind["steps_found"]["hits"] == 0 and not blind["checks"]["changes_steps_found"]
    late = calibration.calibrate_changes(days, null_fleet, worlds, PLAN.days,
                                         lambda v: _late(find_shifts(v)), sweep=False)
    assert late["steps_found"]["hits"] < steps["hits"]


def test_most_changes_in_any_90_days() -> None:
    at = [Shift(day, 1.0, 2.0) for day in (5, 80, 94, 200)]
    assert calibration.most_in_window(at) == 3  # days 5, 80 and 94: 89 days
    assert calibration.most_in_window(at, days=89) == 2  # 5 and 80, or 80 and 94
    assert calibration.most_in_window(at, days=10) == 1
    assert calibration.most_in_window([]) == 0
