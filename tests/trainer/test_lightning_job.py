"""The demo's Lightning job: a real fit, a crash, a resume, reported by its callback alone."""

from __future__ import annotations

import os
import subprocess
import sys
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
