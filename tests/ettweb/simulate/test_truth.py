"""The simulated rollouts' true effects come from simulating their treated jobs again
without them, so they are counterfactuals, not estimates."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from ettweb.simulate.days import COMPONENTS, fleet_days
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import recorded, rollout_schedule
from ettweb.simulate.truth import treated_jobs, true_effect

PLAN = FleetPlan(seed=2, days=90, jobs=900, end=date(2026, 6, 30))


@pytest.fixture(scope="module")
def days() -> object:
    return fleet_days(PLAN, rollout_schedule(PLAN))


def test_per_day_sums_add_up(days: object) -> None:
    assert days.wall == pytest.approx(days.productive + days.lost.sum(axis=1))  # type: ignore
    assert (days.lost >= -1e-9).all()  # type: ignore[attr-defined]
    assert len(COMPONENTS) == days.lost.shape[1]  # type: ignore[attr-defined]


def test_a_stage_helps_its_component_and_simulation_is_repeatable(
        days: object) -> None:
    schedule = rollout_schedule(PLAN)
    stages = recorded(schedule)
    async_pilot = next(s for s in stages if s.optimization == "async_checkpoint"
                       and s.stage == 1)
    truth = true_effect(PLAN, schedule, async_pilot, days, 14,  # type: ignore[arg-type]
                        job_indices=range(PLAN.jobs))
    assert truth.treated_jobs == len(treated_jobs(days, async_pilot, 14))  # type: ignore
    assert truth.component_pts is not None and truth.component_pts < -0.5
    assert truth.ett_pts is not None and truth.ett_pts > 0.5
    # The same jobs under the same schedule are the same jobs: no effect at all.
    same = fleet_days(PLAN, schedule, range(0, PLAN.jobs, 50))
    again = fleet_days(PLAN, schedule, range(0, PLAN.jobs, 50))
    assert np.array_equal(same.wall, again.wall)
