"""The demo's live jobs: the reference TorchRec trainer, then a Lightning job through its adapter.

Why two: the TorchRec job shows what our own trainer reports with every lifecycle switch,
the Lightning job what any fleet's trainer reports with one ``ETTCallback`` and no
hand-written span (``trainer.lightning_job``). Each crashes once and restarts from its last
checkpoint, so both job pages show a failure, a restart gap and repeated steps.

Each runs in the foreground but in its own session, so a terminal's Ctrl-C reaches the demo
alone, which asks the job once to stop (:func:`stop_job`): its supervisor then ends the
attempt ``cancelled``. A second SIGINT in the middle of that cleanup could lose the
``attempt_end``; whatever still left an attempt open is ended by :func:`end_open_attempts`.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from collector.reporter import Reporter
from collector.spool import unframe

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: Seconds a job has to end its attempt after the demo's SIGINT before its group is stopped;
#: its supervisor needs at most 20 (SIGINT, then SIGTERM, 10 s each, to the training process).
STOP_GRACE_S = 30.0
Started = Callable[["subprocess.Popen[bytes]"], None]


def _wait(cmd: list[str], env: Mapping[str, str], started: Started) -> int:
    """Run the job to its end; ``started`` is told its process (the demo stops it on Ctrl-C)."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(env), start_new_session=True)
    started(proc)
    return proc.wait()


def stop_job(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int | None:
    """Ask a job started by :func:`_wait` to stop (one SIGINT, as Ctrl-C would), wait up to
    ``grace_s`` for its supervisor to end the attempt, then kill its process group; returns
    its exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def spooled(spool: Path, job: str) -> list[dict[str, Any]]:
    """The job's events in the demo's spool (a damaged line is skipped)."""
    events: list[dict[str, Any]] = []
    for path in spool.glob(f"{glob.escape(job)}.a*.jsonl"):
        with contextlib.suppress(OSError), path.open("rb") as lines:
            for line in lines:
                with contextlib.suppress(ValueError):
                    event = json.loads(unframe(line))
                    if isinstance(event, dict) and event.get("job") == job:
                        events.append(event)
    return events


def open_attempt(spool: Path, job: str) -> int | None:
    """The job's latest spooled attempt when nothing ended it (no ``attempt_end``), else None."""
    events = spooled(spool, job)
    attempts = [attempt for e in events if isinstance(attempt := e.get("attempt"), int)]
    if not attempts:
        return None
    latest = max(attempts)
    ended = any(e.get("attempt") == latest and e.get("mark") == "attempt_end" for e in events)
    return None if ended else latest


def end_ids(spool: Path, job: str) -> list[str]:
    """The ids of the job's spooled ``attempt_end`` marks (what the demo waits to see stored)."""
    return [str(e["id"]) for e in spooled(spool, job) if e.get("mark") == "attempt_end"]


def end_open_attempts(spool: Path, jobs: list[str]) -> list[tuple[str, int]]:
    """End each job's attempt that its process left open (``cancelled``, ``ended_by: demo``):
    the job was stopped by the demo, and an attempt without an end would show as running
    until the job's next attempt. Returns the (job, attempt) pairs it ended."""
    ended = []
    for job in jobs:
        attempt = open_attempt(spool, job)
        if attempt is None:
            continue
        reporter = Reporter(job, attempt=attempt, rank=0, spool_dir=spool, heartbeat_s=0,
                            install_signal_handlers=False)
        reporter.attempt_end("cancelled", ended_by="demo")
        reporter.shutdown()
        ended.append((job, attempt))
    return ended


def torchrec_command(args: argparse.Namespace, spool: Path, work: Path) -> list[str]:
    return [PY, "-m", "trainer", "--job", args.job, "--steps", str(args.steps),
            "--fail-at-step", str(args.fail_at_step), "--spool-dir", str(spool),
            "--checkpoint-dir", str(work / "checkpoints" / args.job),
            "--restart-delay", str(args.restart_delay), "--log-every", "100",
            *args.trainer_arg]


def lightning_command(args: argparse.Namespace, work: Path) -> list[str]:
    """The Lightning job: crashes at 70% of its steps, after its last checkpoint (every fifth)."""
    steps = args.lightning_steps
    return [PY, "-m", "trainer.lightning_job", "--job", args.lightning_job,
            "--steps", str(steps), "--fail-at-step", str(max(1, steps * 7 // 10)),
            "--checkpoint-every", str(max(1, steps // 5)), "--batch-size", "512",
            "--checkpoint-dir", str(work / "checkpoints" / args.lightning_job),
            "--restart-delay", str(args.restart_delay)]


def train_torchrec(args: argparse.Namespace, spool: Path, work: Path,
                   env: Mapping[str, str], started: Started) -> int:
    return _wait(torchrec_command(args, spool, work), env, started)


def train_lightning(args: argparse.Namespace, spool: Path, work: Path,
                    env: Mapping[str, str], started: Started) -> int:
    """The adapter writes to the demo's spool (``ETT_SPOOL_DIR`` in ``env``)."""
    return _wait(lightning_command(args, work), {**env, "ETT_SPOOL_DIR": str(spool)}, started)
