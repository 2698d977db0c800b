"""The init-overlap compile warm-up process (trainer.warmup): its lock-file handoff, and that
what it compiles is what the trainer then finds in the PT2 caches."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_runs import REPO, run_supervisor

from collector.schema import parse_event
from trainer import warmup

TINY_FLAGS = ["--steps", "12", "--batch-size", "16", "--embedding-rows", "100",
              "--embedding-dim", "8", "--checkpoint-every", "0", "--eval-batches", "0"]


def test_waiting_for_no_warm_up_says_missing(tmp_path: Path) -> None:
    assert warmup.wait(tmp_path / "none.lock", timeout_s=1) == "missing"


def test_waiting_gives_up_while_the_lock_is_still_held(tmp_path: Path) -> None:
    lock = tmp_path / "held.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert warmup.wait(lock, timeout_s=0.2) == "timeout"
    finally:
        os.close(fd)
    assert warmup.wait(lock, timeout_s=1).startswith("failed: the warm-up exited")


@pytest.mark.slow
def test_a_warm_up_that_cannot_start_says_why_and_releases_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "bad.lock"
    process = warmup.spawn(["--steps", "zero"], lock)
    verdict = warmup.wait(lock, timeout_s=120)
    assert process.wait(timeout=30) == 1
    assert verdict.startswith("failed: SystemExit"), verdict


@pytest.mark.integration
def test_the_trainer_compiles_from_what_the_warm_up_left_in_the_cache(tmp_path: Path) -> None:
    run = run_supervisor(tmp_path, *TINY_FLAGS, "--job", "warm", "--opt", "init_overlap",
                         cache=tmp_path / "cold-cache", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    compiles = [e for e in run.events() if e["kind"] == "span" and e["phase"] == "compile"]
    (setup,) = [e for e in compiles if e["attrs"].get("stage") == "setup"]
    assert setup["attrs"]["warm_up"] == "ok"
    background = [e for e in compiles if not e["blocking"]]
    assert background and all(e["attrs"]["fxgraph_cache_miss"] >= 1 for e in background)
    trainer = [e for e in compiles if e["blocking"] and "stage" not in e["attrs"]]
    assert trainer, "the trainer compiled nothing"
    assert sum(e["attrs"]["fxgraph_cache_hit"] for e in trainer) >= len(background)
    assert sum(e["attrs"]["fxgraph_cache_miss"] for e in trainer) == 0
    lock = tmp_path / "cold-cache" / "warm-up-attempt-0.lock"  # the supervisor's, per attempt
    assert lock.read_text() == "ok"


@pytest.mark.integration
def test_a_trainer_started_alone_runs_and_reaps_its_own_warm_up(tmp_path: Path) -> None:
    """No supervisor: the trainer spawns the warm-up itself, reaps it and removes its lock
    folder, and (rank 0, unsupervised) marks its own attempt."""
    spool, scratch = tmp_path / "spool", tmp_path / "tmp"
    scratch.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in (warmup.WARM_UP_ENV, "ETT_SUPERVISED", "ETT_ATTEMPT")}
    env.update({"TMPDIR": str(scratch), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    done = subprocess.run(
        [sys.executable, "-m", "trainer.train", *TINY_FLAGS, "--job", "alone",
         "--opt", "init_overlap", "--spool-dir", str(spool),
         "--checkpoint-dir", str(tmp_path / "checkpoints")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [parse_event(line) for path in sorted(spool.glob("*.jsonl"))
              for line in path.read_text().splitlines()]
    (setup,) = [e for e in events if e["kind"] == "span" and e["phase"] == "compile"
                and e["attrs"].get("stage") == "setup"]
    assert setup["attrs"]["warm_up"] == "ok"
    assert [(e["mark"], e["attrs"].get("status")) for e in events
            if e["kind"] == "mark" and e["mark"] != "heartbeat"] == [
        ("attempt_start", None), ("attempt_end", "completed")]
    assert not list(scratch.glob("ett-warm-up-*"))  # the lock folder went with the warm-up
