"""``python -m bench.lifecycle`` argument handling, without running any training.

The benchmark itself takes minutes; these tests check what it *would* run (``--plan-only``):
the same plan and failure schedule for every profile, one run per optimization in the
ablation, and one-line errors for bad input before any work starts.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import OPTIMIZATIONS

REPO = Path(__file__).resolve().parents[2]


def bench(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.lifecycle", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_quick_plan_runs_both_profiles_on_the_same_plan(tmp_path: Path) -> None:
    done = bench("--quick", "--plan-only", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout.splitlines()[-1])
    runs = {run["name"]: run["command"] for run in plan["runs"]}
    assert list(runs) == ["baseline", "optimized"]  # --quick: no ablation unless asked
    steps = plan["plan"]["steps"]
    assert plan["fail_at_steps"] == [steps * 3 // 10, steps * 7 // 10]
    base, best = runs["baseline"], runs["optimized"]
    assert flag_value(base, "--profile") == "baseline"
    assert flag_value(best, "--profile") == "optimized"
    for flag in ("--steps", "--fail-at-steps", "--batch-size", "--checkpoint-every", "--mtbf"):
        assert flag_value(base, flag) == flag_value(best, flag), flag
    assert flag_value(base, "--fail-at-steps") == ",".join(map(str, plan["fail_at_steps"]))
    assert not list(tmp_path.iterdir())  # nothing ran, nothing was written


def test_ablation_runs_each_optimization_alone(tmp_path: Path) -> None:
    done = bench("--quick", "--ablation", "--plan-only", "--work-dir", str(tmp_path))
    names = [run["name"] for run in json.loads(done.stdout)["runs"]]
    assert names == ["baseline", "optimized", *(f"only-{o}" for o in OPTIMIZATIONS)]


@pytest.mark.parametrize(("flags", "reason"), [
    (["--only", "warp"], "--only: unknown optimization 'warp'"),
    (["--steps", "3"], "--steps 3: at least 10"),
    (["--nproc-per-node", "0"], "--nproc-per-node 0: must be at least 1"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_input_is_one_line_before_any_work(flags: list[str], reason: str,
                                               tmp_path: Path) -> None:
    done = bench("--quick", "--plan-only", "--work-dir", str(tmp_path), *flags)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and reason in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())


def fake_job(ett_pct: float) -> dict[str, object]:
    return {"ett_pct": ett_pct, "wall_s": 100.0, "productive_s": ett_pct, "time_to_start_s": 9.0,
            "time_to_recover_s": [12.5], "failures": 1, "repeated_steps": 40,
            "lost_by_component_s": {"pt2_compiler": 30.0}}


def test_resume_reuses_finished_runs_of_the_same_command_only(tmp_path: Path) -> None:
    from bench import lifecycle

    planned = json.loads(bench("--quick", "--plan-only", "--work-dir", str(tmp_path)).stdout)
    for run, ett in zip(planned["runs"], (40.0, 60.0), strict=True):
        (tmp_path / run["name"]).mkdir()
        (tmp_path / run["name"] / lifecycle.REPORT).write_text(
            json.dumps({"command": run["command"], "job": fake_job(ett)}))
    done = bench("--quick", "--resume", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("reused from") == 2
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["baseline_ett_pct"], summary["optimized_ett_pct"]) == (40.0, 60.0)
    assert summary["ratio"] == 1.5
    same = lifecycle.finished_run(lifecycle.QUICK, "baseline", ["--profile", "baseline"], tmp_path)
    assert same is not None and same["ett_pct"] == 40.0
    other = dataclasses.replace(lifecycle.QUICK, steps=500)  # another plan: another command
    assert lifecycle.finished_run(other, "baseline", ["--profile", "baseline"], tmp_path) is None


def test_a_difference_within_the_noise_is_a_tie_not_an_effect() -> None:
    from bench.lifecycle import ablation_verdict

    assert ablation_verdict(6.61, [6.63]) == "tie"
    assert ablation_verdict(47.0, [115.1]) == "lower"
    assert ablation_verdict(13.0, [11.9]) == "NOT lower"
    assert ablation_verdict(0.0, [0.0]) == "tie"


def lost(**seconds: float) -> dict[str, object]:
    return {"ett_pct": 80.0, "time_to_start_s": 9.0, "lost_by_component_s": seconds}


def test_a_drifting_baseline_cannot_make_a_switch_look_better() -> None:
    """The baseline ran slow: init_overlap beats it, but not a run that leaves trainer_init
    alone, so it is a tie; recovery's extra checkpointing does not count in
    async_checkpoint's control, and plan_cache is not a control for trainer_init."""
    from bench.lifecycle import ablation_rows, ablation_table, control_seconds

    baseline = lost(trainer_init=6.8, checkpointing=11.0)
    results = {"init_overlap": lost(trainer_init=4.5, checkpointing=11.2),
               "plan_cache": lost(trainer_init=3.0, checkpointing=10.9),
               "dynamic_shapes": lost(trainer_init=4.6, checkpointing=10.8),
               "recovery": lost(trainer_init=4.7, checkpointing=48.0),
               "async_checkpoint": lost(trainer_init=4.6, checkpointing=4.0)}
    assert sorted(control_seconds("trainer_init", baseline, results)) == [4.6, 4.6, 4.7, 6.8]
    assert sorted(control_seconds("checkpointing", baseline, results)) == [
        10.8, 10.9, 11.0, 11.2]
    verdicts = {row.opt: row.verdict for row in ablation_rows(baseline, results)}
    assert (verdicts["init_overlap"], verdicts["plan_cache"], verdicts["async_checkpoint"]) == (
        "tie", "lower", "lower")
    table = "\n".join(ablation_table(baseline, results))
    assert "trainer_init            6.80       4.60-6.80      4.50       tie" in table
    assert "control for trainer_init: 4 run(s)" in table


def test_lower_means_outside_the_whole_control() -> None:
    from bench.lifecycle import ablation_verdict

    control = [10.0, 9.6, 10.5]
    assert ablation_verdict(9.3, control) == "tie"  # below the baseline, not below every run
    assert ablation_verdict(9.0, control) == "lower"
    assert ablation_verdict(10.8, control) == "tie"  # above the baseline, not above every run
    assert ablation_verdict(11.1, control) == "NOT lower"
