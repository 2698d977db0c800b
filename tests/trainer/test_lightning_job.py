"""The demo's Lightning job: a real fit, a crash, a resume, reported by its callback alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.collector.integrations.adapter_runs import spool_events
from trainer.lightning_job import parse_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_crash_and_a_resume_are_two_attempts_with_repeated_steps(tmp_path: Path) -> None:
    env = {**os.environ, "ETT_SPOOL_DIR": str(tmp_path / "spool")}
    env.pop("ETT_JOB_ID", None)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.lightning_job", "--job", "lj", "--steps", "10",
         "--fail-at-step", "7", "--checkpoint-every", "3", "--restart-delay", "0",
         "--batch-size", "32", "--embedding-rows", "100",
         "--checkpoint-dir", str(tmp_path / "ckpt")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "injected failure at step 7" in proc.stderr
    events = [e for e in spool_events(tmp_path / "spool") if e["job"] == "lj"]
    ends = {e["attempt"]: e["attrs"]["status"] for e in events if e.get("mark") == "attempt_end"}
    assert ends == {0: "failed", 1: "completed"}
    trains = sorted((e["attempt"], e["step_start"], e["step_end"]) for e in events
                    if e.get("phase") == "train")
    # Attempt 0 trained up to the crash; attempt 1 resumed from the save at step 6.
    assert max(end for attempt, _, end in trains if attempt == 0) == 7
    assert min(start for attempt, start, _ in trains if attempt == 1) == 6
    assert max(end for attempt, _, end in trains if attempt == 1) == 10
    phases = {(e["attempt"], e.get("phase")) for e in events}
    assert (1, "checkpoint_load") in phases and (0, "checkpoint_save") in phases


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "10", "--fail-at-step", "10"],
                                  ["--checkpoint-every", "0"]])
def test_bad_settings_are_refused_by_name(argv: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "must be" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigterm"])
def test_a_stop_mid_training_ends_the_attempt_cancelled_and_restarts_nothing(
        tmp_path: Path, signum: int, group: bool) -> None:
    """Ctrl-C (SIGINT to the terminal's group) or SIGTERM to the supervisor while attempt 0
    trains: the attempt runs in its own session, gets one SIGINT from the supervisor, and
    its callback ends it ``cancelled``. Python's own wait used to kill it a quarter of a
    second after a Ctrl-C, with the end unwritten, so the job showed as running."""
    spool = tmp_path / "spool"
    env = {**os.environ, "ETT_SPOOL_DIR": str(spool)}
    env.pop("ETT_JOB_ID", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.lightning_job", "--job", "stop", "--steps", "100000",
         "--fail-at-step", "0", "--checkpoint-every", "20", "--restart-delay", "0",
         "--batch-size", "4", "--embedding-rows", "100",
         "--checkpoint-dir", str(tmp_path / "ckpt")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not spool.is_dir() or not any(e.get("phase") == "checkpoint_save"
                                            for e in spool_events(spool)):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-2000:]
    events = [e for e in spool_events(spool) if e["job"] == "stop"]
    ends = [(e["attempt"], e["attrs"]["status"]) for e in events
            if e.get("mark") == "attempt_end"]
    assert ends == [(0, "cancelled")], out[-2000:]
    assert {e["attempt"] for e in events} == {0}
