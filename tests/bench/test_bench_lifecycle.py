"""``python -m bench.lifecycle`` argument handling, without running any training.

The benchmark itself takes minutes; these tests check what it *would* run (``--plan-only``):
the same plan and failure schedule for every profile, interleaved repeats after a cold-store
run, one run per optimization in the ablation, and one-line errors for bad input before any
work starts; and, on made-up reports, how runs become medians, ranges and a verdict.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    assert list(runs) == ["baseline-1", "optimized-1"]  # --quick: one each, no ablation
    steps = plan["plan"]["steps"]
    assert plan["fail_at_steps"] == [steps * 3 // 10, steps * 7 // 10]
    base, best = runs["baseline-1"], runs["optimized-1"]
    assert flag_value(base, "--profile") == "baseline"
    assert flag_value(best, "--profile") == "optimized"
    for flag in ("--steps", "--fail-at-steps", "--batch-size", "--checkpoint-every", "--mtbf"):
        assert flag_value(base, flag) == flag_value(best, flag), flag
    assert flag_value(base, "--fail-at-steps") == ",".join(map(str, plan["fail_at_steps"]))
    assert not list(tmp_path.iterdir())  # nothing ran, nothing was written


def test_ablation_runs_each_optimization_alone(tmp_path: Path) -> None:
    done = bench("--quick", "--ablation", "--plan-only", "--work-dir", str(tmp_path))
    names = [run["name"] for run in json.loads(done.stdout)["runs"]]
    assert names == ["baseline-1", "optimized-1", *(f"only-{o}" for o in OPTIMIZATIONS)]


def test_default_plan_interleaves_repeats_after_a_cold_store_run(tmp_path: Path) -> None:
    """The first job of the model meets the empty store; then the profiles alternate in
    mirrored pairs, so a load that drifts during the hour falls on both alike."""
    done = bench("--plan-only", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    runs = {run["name"]: run["command"] for run in json.loads(done.stdout)["runs"]}
    assert list(runs) == ["optimized-cold", "baseline-1", "optimized-1", "optimized-2",
                          "baseline-2"]
    stores = {flag_value(command, "--compile-store") for command in runs.values()}
    assert stores == {str(tmp_path / "compile-store")}  # one store for every job of the model
    assert [flag_value(c, "--profile") for c in runs.values()] == [
        "optimized", "baseline", "optimized", "optimized", "baseline"]
    three = bench("--plan-only", "--repeats", "3", "--no-cold-store-run",
                  "--work-dir", str(tmp_path))
    assert [run["name"] for run in json.loads(three.stdout)["runs"]] == [
        "baseline-1", "optimized-1", "optimized-2", "baseline-2", "baseline-3", "optimized-3"]


@pytest.mark.parametrize(("flags", "reason"), [
    (["--only", "warp"], "--only: unknown optimization 'warp'"),
    (["--steps", "3"], "--steps 3: at least 10"),
    (["--nproc-per-node", "0"], "--nproc-per-node 0: must be at least 1"),
    (["--repeats", "0"], "--repeats 0: must be at least 1"),
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
    assert summary["verdict"].startswith("no call: one run of a profile has no range")
    flags = ["--profile", "baseline"]
    same = lifecycle.finished_run(lifecycle.QUICK, "baseline-1", flags, tmp_path)
    assert same is not None and same["job"]["ett_pct"] == 40.0
    assert same["store"] == "none" and same["load_average"] is None  # an older record
    other = dataclasses.replace(lifecycle.QUICK, steps=500)  # another plan: another command
    assert lifecycle.finished_run(other, "baseline-1", flags, tmp_path) is None


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


def record(ett_pct: float, store: str = "none", load: float = 1.0) -> dict[str, Any]:
    return {"job": fake_job(ett_pct), "load_average": load, "store": store}


def test_a_gain_is_called_only_when_the_ranges_do_not_overlap() -> None:
    from bench.lifecycle import ProfileRuns, verdict

    def runs(profile: str, *ett: float) -> ProfileRuns:
        return ProfileRuns(profile, tuple(f"{profile}-{i}" for i in range(len(ett))), ett)

    assert verdict(runs("baseline", 76.0, 78.2), runs("optimized", 91.0, 92.5)) == "gain"
    # the medians differ by 12 points, but one optimized run fell inside the baseline's range
    assert verdict(runs("baseline", 76.0, 88.0), runs("optimized", 87.0, 93.0, 94.0)) == (
        "no call: the ranges overlap")
    assert verdict(runs("baseline", 90.0, 91.0), runs("optimized", 80.0, 81.0)) == "loss"
    assert verdict(runs("baseline", 76.0), runs("optimized", 91.0, 92.0)).startswith("no call")
    three = runs("optimized", 93.0, 90.0, 91.0)
    assert (three.median, three.low, three.high, three.median_run) == (
        91.0, 90.0, 93.0, "optimized-2")


def test_the_cold_store_run_is_shown_beside_the_medians_not_in_them() -> None:
    from bench.lifecycle import DEFAULT, runs_table, summary, summary_lines

    results = {"optimized-cold": record(80.0, "cold", 1.4), "baseline-1": record(75.0),
               "optimized-1": record(91.0, "warm"), "optimized-2": record(93.0, "warm"),
               "baseline-2": record(77.0, load=2.0)}
    result = summary(results, DEFAULT)
    assert result["optimized_range"] == [91.0, 93.0]  # 80.0, the cold store, is not in it
    assert (result["optimized_ett_pct"], result["baseline_ett_pct"]) == (92.0, 76.0)
    assert result["ratio"] == round(92.0 / 76.0, 4) and result["verdict"] == "gain"
    assert result["cold_store_ett_pct"] == 80.0
    assert result["order"] == list(results)
    assert [run["load_average"] for run in result["runs"]] == [1.4, 1.0, 1.0, 1.0, 2.0]
    text = "\n".join(runs_table(results) + summary_lines(result))
    assert "optimized-cold     cold   80.00" in text
    assert "baseline-2         none   77.00" in text and " 2.00" in text
    assert "optimized  median  92.00   range 91.00-93.00" in text
    assert "the first job of the model (cold store) 80.0%" in text


@pytest.mark.parametrize(("found", "state"), [("hit", "warm"), ("miss", "cold"),
                                              ("damaged", "damaged"), (None, "none")])
def test_a_runs_store_state_is_what_its_fetch_found(tmp_path: Path, found: str | None,
                                                     state: str) -> None:
    """Read from the job's own ``store_fetch`` span: an entry in the folder for another key
    (an ablation run's config) is no hit."""
    from bench.lifecycle import store_state
    from collector.spool import frame

    events = [{"v": 1, "id": "e0", "job": "j", "attempt": 0, "kind": "mark", "rank": 0,
               "host": "h", "mark": "attempt_start", "ts": 1.0, "attrs": {}}]
    if found is not None:
        events.append({"v": 1, "id": "e1", "job": "j", "attempt": 0, "kind": "span", "rank": 0,
                       "host": "h", "phase": "compile", "start": 1.0, "end": 1.1,
                       "attrs": {"stage": "store_fetch", "store": found}})
    (tmp_path / "j.a0.r0.1.x.00000.jsonl").write_text(
        "".join(frame(json.dumps(e)) + "\n" for e in events))
    assert store_state(tmp_path) == state
