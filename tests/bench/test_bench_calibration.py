"""``bench.calibration`` can fail: a broken estimator calibrated on a small A/A fleet shows
its false positives, while the product's estimator there stays near its 5%."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from bench import calibration
from ettweb.rollouts.estimators import Group
from ettweb.simulate.days import fleet_days
from ettweb.simulate.fleet import FleetPlan

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
