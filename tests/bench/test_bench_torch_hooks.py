"""bench.integration_stages.torch_hooks prints its result line: both loops ran the same steps
and the reported one was reported; the overhead and emit figures are measured, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_bare_and_the_reported_loop_run_side_by_side() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.integration_stages.torch_hooks",
                           "--steps", "50", "--step-ms", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps_per_side"] == 50  # two rounds of 25-step blocks per side
    assert result["spooled"] == {"train_steps": 50, "data_init_spans": 2}
    assert result["reporter_drained"] and result["dropped_events"] == 0
    assert result["step_ms"]["target"] == 2.0
    assert result["step_ms"]["bare"] > 0 and result["step_ms"]["reported"] > 0
    loop, bare_step = result["loop_us"], result["step_ms"]["bare"] / 1000
    expected = (loop["reported"] - loop["bare"]) / 1e6 / bare_step
    assert abs(result["direct_overhead_fraction"] - expected) < 1e-4
    assert result["emit_p99_us"] > 0
    assert result["targets"] == {"overhead_fraction": 0.01, "emit_p99_us": 50.0}
