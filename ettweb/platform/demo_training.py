"""The demo's live jobs: the reference TorchRec trainer, then a Lightning job through its adapter.

Why two: the TorchRec job shows what our own trainer reports with every lifecycle switch,
the Lightning job what any fleet's trainer reports with one ``ETTCallback`` and no
hand-written span (``trainer.lightning_job``). Each crashes once and restarts from its last
checkpoint, so both job pages show a failure, a restart gap and repeated steps. Each runs in
the foreground and is interrupted cleanly on Ctrl-C: its supervisor reports the attempt as
cancelled, given time to.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
STOP_GRACE_S = 30


def _wait(cmd: list[str], env: Mapping[str, str]) -> int:
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(env))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


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
                   env: Mapping[str, str]) -> int:
    return _wait(torchrec_command(args, spool, work), env)


def train_lightning(args: argparse.Namespace, spool: Path, work: Path,
                    env: Mapping[str, str]) -> int:
    """The adapter writes to the demo's spool (``ETT_SPOOL_DIR`` in ``env``)."""
    return _wait(lightning_command(args, work), {**env, "ETT_SPOOL_DIR": str(spool)})
