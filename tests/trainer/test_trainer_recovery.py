"""Young/Daly checkpoint intervals (the ``recovery`` switch), checked against published values."""

from __future__ import annotations

import math

import pytest

from trainer.recovery import daly_interval_s, interval_steps, young_interval_s


@pytest.mark.parametrize(("mtbf_min", "cost_min", "published_min"), [
    (1440, 5, 117), (360, 5, 57), (15, 5, 9.1)])
def test_daly_matches_his_published_intervals(mtbf_min: float, cost_min: float,
                                              published_min: float) -> None:
    assert daly_interval_s(cost_min * 60, mtbf_min * 60) / 60 == pytest.approx(published_min,
                                                                               abs=0.6)


def test_young_is_the_square_root_law() -> None:
    assert young_interval_s(2.0, 400.0) == pytest.approx(40.0)
    assert young_interval_s(8.0, 400.0) == pytest.approx(2 * young_interval_s(2.0, 400.0))


def test_a_cost_beyond_twice_the_mtbf_checkpoints_every_mtbf() -> None:
    assert daly_interval_s(50.0, 20.0) == 20.0


def test_interval_in_steps_respects_the_background_write_and_a_floor() -> None:
    seconds = daly_interval_s(0.5, 600.0)
    assert interval_steps(0.5, 600.0, 0.01) == round(seconds / 0.01)
    assert interval_steps(0.5, 600.0, 0.01, background_s=100.0) == 10_000
    assert interval_steps(0.0, 600.0, 0.01, at_least=3) == 3
    assert not math.isnan(daly_interval_s(1e-9, 1.0))
