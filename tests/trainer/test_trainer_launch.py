"""The supervisor and trainer end to end: a tiny job crashes at step 25 and is restarted.

Why module-scoped runs: one tiny run with a crash and a restart takes ~30-50 s on 2 cores (most
of it the first, cold inductor compile), so the tests that inspect it share it.

Every assertion reads what a real run left behind: spool files (validated line by line by
``collector.schema``), checkpoint folders and progress lines.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainer_runs import (
    REPO,
    TINY,
    TrainerRun,
    attribution_report,
    run_supervisor,
    spool_as_one_file,
)

from collector.schema import parse_event

pytestmark = pytest.mark.integration  # real supervisor and trainer processes

JOB = "tiny-crash"
STEPS, FAIL_AT, EVERY = 40, 25, 10
LAST_CHECKPOINT_BEFORE_CRASH = FAIL_AT // EVERY * EVERY  # 20


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path) -> TrainerRun:
    tmp = tmp_path_factory.mktemp("crashed-run")
    return run_supervisor(tmp, *TINY, "--job", JOB, "--fail-at-step", str(FAIL_AT),
                          "--team", "recsys", "--cluster", "laptop", cache=compile_cache)


def spans(events: list[dict[str, Any]], attempt: int, phase: str) -> list[dict[str, Any]]:
    return sorted((e for e in events if e["kind"] == "span" and e["attempt"] == attempt
                   and e["phase"] == phase), key=lambda e: e["start"])


def marks(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return sorted((e for e in events if e["kind"] == "mark" and e["mark"] == name),
                  key=lambda e: e["attempt"])


def test_supervisor_succeeds_after_one_restart(crashed_run: TrainerRun) -> None:
    assert crashed_run.returncode == 0, crashed_run.stderr[-3000:]
    assert "simulated failure at step 25" in crashed_run.stderr
    assert "attempt 0 failed; restarting in 0.5 s" in crashed_run.stderr


def test_train_spans_never_overlap_compile_spans(crashed_run: TrainerRun) -> None:
    """A compilation inside a step pauses the train tracker: its seconds are not productive."""
    events = crashed_run.events()
    for attempt in (0, 1):
        for comp in spans(events, attempt, "compile"):
            for train in spans(events, attempt, "train"):
                assert train["end"] <= comp["start"] or train["start"] >= comp["end"]


def test_every_spooled_line_is_schema_valid(crashed_run: TrainerRun) -> None:
    events = crashed_run.events()  # parse_event raises on any invalid line
    assert len(events) > 20
    assert {e["job"] for e in events} == {JOB}
    assert len({e["id"] for e in events}) == len(events)


def test_two_attempts_failed_then_completed(crashed_run: TrainerRun) -> None:
    events = crashed_run.events()
    starts, ends = marks(events, "attempt_start"), marks(events, "attempt_end")
    assert [e["attempt"] for e in starts] == [0, 1]
    assert all(e["attrs"] == {"gpus": 1, "model": "dlrm", "team": "recsys",
                              "cluster": "laptop"} for e in starts)
    assert [(e["attempt"], e["attrs"]["status"]) for e in ends] == [(0, "failed"),
                                                                    (1, "completed")]
    assert ends[0]["ts"] < starts[1]["ts"]  # a restart gap lies between the attempts


def test_restart_resumes_at_the_checkpoint_and_trains_those_steps_again(
        crashed_run: TrainerRun) -> None:
    events = crashed_run.events()
    first_attempt = spans(events, 0, "train")
    high_water = max(e["step_end"] for e in first_attempt)
    assert high_water == FAIL_AT
    (load,) = spans(events, 1, "checkpoint_load")
    assert load["attrs"]["step"] == LAST_CHECKPOINT_BEFORE_CRASH
    # Compile time comes from PyTorch's hooks; the kept cache folder makes the restart hit.
    hooked = [e for e in spans(events, 1, "compile") if "trigger" in e["attrs"]]
    assert hooked and sum(e["attrs"]["fxgraph_cache_hit"] for e in hooked) > 0
    second_attempt = spans(events, 1, "train")
    assert second_attempt[0]["step_start"] == LAST_CHECKPOINT_BEFORE_CRASH
    assert second_attempt[0]["step_start"] < high_water  # repeated training
    ranges = [(e["step_start"], e["step_end"]) for e in second_attempt]
    assert all(a_end == b_start for (_, a_end), (b_start, _) in itertools.pairwise(ranges))
    assert ranges[-1][1] == STEPS


def test_phases_of_each_attempt(crashed_run: TrainerRun) -> None:
    events = crashed_run.events()
    start_up = {"container_start", "rendezvous", "process_group_init", "model_init",
                "sharding_plan", "data_init", "compile", "train", "checkpoint_save"}
    phases = {a: {e["phase"] for e in events if e["kind"] == "span" and e["attempt"] == a}
              for a in (0, 1)}
    assert phases[0] == start_up  # crashed: no load, eval or shutdown
    assert phases[1] == start_up | {"checkpoint_load", "eval", "shutdown"}
    saved = {a: [e["attrs"]["step"] for e in spans(events, a, "checkpoint_save")] for a in (0, 1)}
    assert saved == {0: [10, 20], 1: [30, 40]}


def test_train_spans_exclude_checkpoint_time(crashed_run: TrainerRun) -> None:
    events = crashed_run.events()
    for attempt in (0, 1):
        for save in spans(events, attempt, "checkpoint_save"):
            for train in spans(events, attempt, "train"):
                assert train["end"] <= save["start"] or train["start"] >= save["end"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # reading without ranks
def test_last_two_checkpoints_are_kept_and_the_final_one_holds_the_last_step(
        crashed_run: TrainerRun) -> None:
    import torch.distributed.checkpoint as dcp

    folders = sorted(p.name for p in crashed_run.checkpoint_dir.iterdir())
    assert folders == ["step-00000030", "step-00000040"]
    state: dict[str, Any] = {"step": -1}
    dcp.load(state, checkpoint_id=str(crashed_run.checkpoint_dir / folders[-1]), no_dist=True)
    assert state["step"] == STEPS


def losses_by_step(stderr: str, attempt: int) -> dict[int, str]:
    pattern = re.compile(rf"\[{JOB} attempt {attempt}\] step (\d+)/{STEPS} loss (\S+)")
    return {int(step): loss for step, loss in pattern.findall(stderr)}


def test_repeated_steps_see_exactly_the_same_batches(crashed_run: TrainerRun) -> None:
    """Same checkpointed state + same batches => the same losses, digit for digit."""
    before, after = losses_by_step(crashed_run.stderr, 0), losses_by_step(crashed_run.stderr, 1)
    repeated = sorted(before.keys() & after.keys())
    assert repeated == list(range(LAST_CHECKPOINT_BEFORE_CRASH + 1, FAIL_AT + 1))
    assert [before[s] for s in repeated] == [after[s] for s in repeated]
    assert len(set(before.values())) > 10  # the loss does move from step to step


def test_attribution_report_sees_the_restart(crashed_run: TrainerRun, tmp_path: Path) -> None:
    report = attribution_report(spool_as_one_file(crashed_run, tmp_path / "events.jsonl"))
    assert report["rejected"] == []
    (job,) = report["jobs"]
    assert job["attempts"] == 2
    assert job["failures"] == 1
    assert job["repeated_steps"] == FAIL_AT - LAST_CHECKPOINT_BEFORE_CRASH
    lost = job["lost_s"]
    for category in ("repeated_training", "restart_gap", "compile", "checkpoint_save",
                     "checkpoint_load", "container_start"):
        assert lost.get(category, 0) > 0, category
    assert 0 < job["ett_pct"] < 100
    assert len(job["time_to_recover_s"]) == 1


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path) -> TrainerRun:
    tmp = tmp_path_factory.mktemp("two-ranks")
    return run_supervisor(tmp, "--nproc-per-node", "2", "--no-compile", "--job", "two-ranks",
                          "--steps", "20", "--batch-size", "32", "--embedding-rows", "500",
                          "--embedding-dim", "8", "--checkpoint-every", "10",
                          "--fail-at-step", "15", "--eval-batches", "1",
                          "--restart-delay", "0", "--opt", "plan_cache,init_overlap",
                          cache=compile_cache)


def test_torchrun_two_ranks_crash_and_resume(two_rank_run: TrainerRun) -> None:
    assert two_rank_run.returncode == 0, two_rank_run.stderr[-3000:]
    events = two_rank_run.events()
    starts = marks(events, "attempt_start")
    assert [(e["attempt"], e["attrs"]["gpus"]) for e in starts] == [(0, 2), (1, 2)]
    for rank in (0, 1):
        loads = [e for e in events if e["kind"] == "span" and e["phase"] == "checkpoint_load"
                 and e["rank"] == rank]
        assert [(e["attempt"], e["attrs"]["step"]) for e in loads] == [(1, 10)]
        trained = [e for e in events if e["kind"] == "span" and e["phase"] == "train"
                   and e["rank"] == rank and e["attempt"] == 1]
        assert trained[0]["step_start"] == 10 and trained[-1]["step_end"] == 20
    assert not list(two_rank_run.checkpoint_dir.glob("*.tmp"))
    plans = [e["attrs"]["cached"] for e in events if e["kind"] == "span"
             and e["phase"] == "sharding_plan"]
    assert sorted(plans) == [False, False, True, True]  # planned once, reused on restart
    table_inits = sorted((e["attempt"], e["rank"], e["attrs"]["table_init"]) for e in events
                         if e["kind"] == "span" and e["attrs"].get("stage") == "shard")
    # init_overlap: a restart skips the random init its checkpoint load overwrites
    assert table_inits == [(0, 0, "done"), (0, 1, "done"), (1, 0, "deferred"),
                           (1, 1, "deferred")]


def test_torchrun_can_do_the_restarts_itself(tmp_path: Path, compile_cache: Path) -> None:
    """``--restarts-by torchrun``: one torchrun with ``--max-restarts``; rank 0 of the trainer
    marks each attempt (numbered by torchrun's restart count), and the crashed one, which
    could not say so, is seen as lost."""
    run = run_supervisor(tmp_path, "--restarts-by", "torchrun", "--nproc-per-node", "2",
                         "--no-compile", "--job", "by-torchrun", "--steps", "20",
                         "--batch-size", "32", "--embedding-rows", "500", "--embedding-dim", "8",
                         "--checkpoint-every", "10", "--fail-at-step", "15",
                         "--eval-batches", "0", cache=compile_cache)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "--max-restarts 3" in run.stderr
    events = run.events()
    starts = marks(events, "attempt_start")
    assert [(e["attempt"], e["rank"], e["attrs"]["gpus"], e["attrs"]["launcher"])
            for e in starts] == [(0, 0, 2, "torchrun"), (1, 0, 2, "torchrun")]
    ends = marks(events, "attempt_end")
    assert [(e["attempt"], e["attrs"]["status"]) for e in ends] == [(1, "completed")]
    loads = sorted((e["rank"], e["attrs"]["step"]) for e in events
                   if e["kind"] == "span" and e["phase"] == "checkpoint_load")
    assert loads == [(0, 10), (1, 10)]
    container = [e for e in events if e["kind"] == "span" and e["phase"] == "container_start"]
    assert {(e["attempt"], e["rank"]) for e in container} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    report = attribution_report(spool_as_one_file(run, tmp_path / "all.jsonl"))
    (job,) = report["jobs"]
    assert job["attempts"] == 2 and job["failures"] == 1
    assert job["repeated_steps"] == 2 * (15 - 10)  # both ranks train steps 10..15 again


BAD_FLAGS = [
    (["--steps", "0"], "--steps: must be at least 1"),
    (["--steps", "-5"], "--steps: -5 is negative"),
    (["--batch-size", "many"], "--batch-size: 'many' is not an integer"),
    (["--steps", "40", "--fail-at-step", "40"], "--fail-at-step 40 is not before the last step"),
    (["--restart-delay", "-1"], "--restart-delay: -1 is not a finite number >= 0"),
    (["--max-restarts", "-1"], "--max-restarts: -1 is negative"),
    (["--nproc-per-node", "0"], "--nproc-per-node: must be at least 1"),
    (["--checkpoint-every", "1.5"], "--checkpoint-every: '1.5' is not an integer"),
    (["--embedding-dim", "0"], "--embedding-dim: must be at least 1"),
    (["--job", ""], "a job id must be 1-200 characters"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--opt", "turbo"], "argument --opt: unknown optimization 'turbo'"),
    (["--restarts-by", "slurm"], "argument --restarts-by: invalid choice: 'slurm'"),
    (["--steps", "40", "--fail-at-steps", "10,40"], "--fail-at-steps 40 is not before the last"),
]


@pytest.mark.parametrize(("flags", "reason"), BAD_FLAGS)
def test_bad_flags_exit_with_one_line_before_any_work(
        flags: list[str], reason: str, tmp_path: Path, compile_cache: Path) -> None:
    run = run_supervisor(tmp_path, *flags, cache=compile_cache, timeout=30)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("python -m trainer: error: ")
    assert reason in lines[0]
    assert not run.spool_dir.exists() and not run.checkpoint_dir.exists()


def test_help_names_the_flags(tmp_path: Path, compile_cache: Path) -> None:
    run = run_supervisor(tmp_path, "--help", cache=compile_cache, timeout=30)
    assert run.returncode == 0
    for flag in ("--job", "--steps", "--batch-size", "--checkpoint-every", "--checkpoint-dir",
                 "--spool-dir", "--fail-at-step", "--restart-delay", "--max-restarts", "--seed",
                 "--nproc-per-node", "--compile", "--no-compile", "--embedding-rows",
                 "--embedding-dim", "--compile-store", "--no-compile-store"):
        assert flag in run.stdout, flag


def test_no_restarts_left_means_the_job_fails(tmp_path: Path, compile_cache: Path) -> None:
    run = run_supervisor(tmp_path, *TINY, "--no-compile", "--job", "gives-up",
                         "--fail-at-step", "3", "--max-restarts", "0", cache=compile_cache)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "no restarts left (--max-restarts 0)" in run.stderr
    events = run.events()
    assert [(e["attempt"], e["attrs"]["status"]) for e in marks(events, "attempt_end")] == [
        (0, "failed")]
    assert not spans(events, 0, "compile")  # --no-compile
    assert [(e["step_start"], e["step_end"]) for e in spans(events, 0, "train")] == [(0, 3)]


def test_interrupt_cancels_the_attempt(tmp_path: Path, compile_cache: Path) -> None:
    """Ctrl-C (SIGINT) stops the child and ends the attempt as cancelled, exit status 130."""
    spool = tmp_path / "spool"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "trainer", "--job", "interrupted", "--no-compile",
         "--steps", "100000", "--batch-size", "64", "--embedding-rows", "1000",
         "--embedding-dim", "16", "--checkpoint-every", "0", "--spool-dir", str(spool),
         "--checkpoint-dir", str(tmp_path / "checkpoints"), "--compile-cache-dir",
         str(compile_cache)],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    assert supervisor.stderr is not None
    for line in supervisor.stderr:  # wait until it trains
        if "training steps" in line:
            break
    supervisor.send_signal(signal.SIGINT)
    _, rest = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 130, rest
    assert "attempt 0 cancelled" in rest
    events = [parse_event(line) for path in spool.glob("*.jsonl")
              for line in path.read_text().splitlines()]
    assert [e["attrs"]["status"] for e in marks(events, "attempt_end")] == ["cancelled"]
    assert len(marks(events, "attempt_start")) == 1
