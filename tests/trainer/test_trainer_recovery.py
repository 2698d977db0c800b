"""Young/Daly checkpoint intervals (the ``recovery`` switch), checked against published values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trainer_runs import run_supervisor

from trainer.recovery import (
    MEASURED_FILE,
    PROBE_STEPS,
    Measured,
    daly_interval_s,
    interference_s,
    interval_steps,
    load_measured,
    save_measured,
    young_interval_s,
)


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


def test_the_measurement_survives_a_restart_and_a_damaged_one_is_ignored(
        tmp_path: Path) -> None:
    measured = Measured(cost_s=1.5, step_s=0.02, background_s=0.4, interference_s=0.5)
    save_measured(tmp_path, measured)
    assert load_measured(tmp_path) == measured
    assert measured.interval_steps(300.0) == interval_steps(2.0, 300.0, 0.02, background_s=0.4)
    for damaged in ("{not json", '{"cost_s": 1}', '{"cost_s": -1, "step_s": 0.1}',
                    '{"cost_s": 1, "step_s": 0}', '{"cost_s": "NaN", "step_s": 0.1}'):
        (tmp_path / MEASURED_FILE).write_text(damaged)
        assert load_measured(tmp_path) is None, damaged
    assert load_measured(tmp_path / "nowhere") is None


@pytest.mark.integration
def test_recovery_probes_the_cost_early_and_a_restart_reuses_it(tmp_path: Path,
                                                                 compile_cache: Path) -> None:
    run = run_supervisor(tmp_path, "--no-compile", "--job", "probe", "--steps", "300",
                         "--batch-size", "16", "--embedding-rows", "100", "--embedding-dim", "4",
                         "--checkpoint-every", "250", "--fail-at-step", "150",
                         "--eval-batches", "0", "--restart-delay", "0", "--opt", "recovery",
                         "--mtbf", "0.05", cache=compile_cache)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"first checkpoint {PROBE_STEPS} steps in" in run.stderr
    loads = [e["attrs"]["step"] for e in run.events()
             if e["kind"] == "span" and e["phase"] == "checkpoint_load"]
    assert loads and loads[0] >= PROBE_STEPS  # not back to step 0, as the fixed 250 would
    assert "recovery (kept from an earlier attempt)" in run.stderr
    assert load_measured(run.checkpoint_dir) is not None


def test_a_write_that_slows_training_costs_what_the_slower_steps_lost() -> None:
    # 10 s of writing at 25 ms a step instead of 20 ms: 400 steps, each 5 ms late = 2 s
    assert interference_s(10.0, 0.020, 0.025) == pytest.approx(2.0)
    assert interference_s(10.0, 0.020, 0.019) == 0.0  # not slower: no cost
    assert interference_s(10.0, 0.020, None) == 0.0  # no step overlapped a write
    assert interference_s(0.0, 0.020, 0.030) == 0.0
    cheap = Measured(cost_s=0.3, step_s=0.02, background_s=5.0)
    costly = Measured(cost_s=0.3, step_s=0.02, background_s=5.0,
                      interference_s=interference_s(5.0, 0.02, 0.03))
    assert costly.interval_steps(300.0) > cheap.interval_steps(300.0)  # save less often
