"""Running the real supervisor (``python -m trainer``) as a subprocess, and reading its output.

Why a named module and not conftest: several test folders have a conftest.py, and imports of
``conftest`` by name would be ambiguous.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.schema import parse_event

REPO = Path(__file__).resolve().parents[2]

#: The tiny configuration: seconds of training, a checkpoint every 10 steps.
TINY = ("--steps", "40", "--batch-size", "64", "--embedding-rows", "1000",
        "--embedding-dim", "16", "--checkpoint-every", "10", "--eval-batches", "2",
        "--log-every", "1", "--restart-delay", "0.5")


@dataclass
class TrainerRun:
    """A finished supervisor run: its exit status, output and files."""

    returncode: int
    stdout: str
    stderr: str
    spool_dir: Path
    checkpoint_dir: Path

    def spool_files(self) -> list[Path]:
        return sorted(self.spool_dir.glob("*.jsonl"))

    def events(self) -> list[dict[str, Any]]:
        """Every spooled event, each validated by the one schema module."""
        return [parse_event(line) for path in self.spool_files()
                for line in path.read_text().splitlines()]


def run_supervisor(tmp: Path, *flags: str, cache: Path, timeout: float = 120) -> TrainerRun:
    spool, checkpoints = tmp / "spool", tmp / "checkpoints"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "--spool-dir", str(spool),
         "--checkpoint-dir", str(checkpoints), "--compile-cache-dir", str(cache), *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return TrainerRun(proc.returncode, proc.stdout, proc.stderr, spool, checkpoints)


def spool_as_one_file(run: TrainerRun, target: Path) -> Path:
    """All spool files in one JSONL file, as the collector would ship them."""
    target.write_text("".join(path.read_text() for path in run.spool_files()))
    return target


def attribution_report(events_file: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "ettweb.attribution", str(events_file)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    report: dict[str, Any] = json.loads(proc.stdout)
    return report
