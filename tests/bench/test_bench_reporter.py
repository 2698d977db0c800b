"""bench.reporter prints its result line; the emit figures are measured, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_reporter_quick_prints_emit_percentiles() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.reporter", "--quick", "--no-torch"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert 0 < result["emit_p50_us"] <= result["emit_p99_us"]
    assert result["targets"] == {"emit_p99_us": 15.0, "overhead_pct": 1.0}
    assert "overhead_pct_direct" not in result  # --no-torch: no training step was timed


@pytest.mark.slow
def test_bench_reporter_times_the_real_torchrec_step() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.reporter", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps_each"] == 10  # --quick: 2 rounds of 5-step blocks per side
    assert result["step_ms_bare"] > 0 and result["reporter_us_per_step"] > 0
    low, high = result["overhead_pct_ci95"]
    assert low <= result["overhead_pct_side_by_side"] <= high


def test_median_ci_brackets_the_median() -> None:
    from bench.reporter import _median_ci

    median, low, high = _median_ci([float(v) for v in range(1, 41)])
    assert median == 20.5
    assert (low, high) == (14.0, 27.0)  # order statistics 13 and 26 (0-based) of 40 values
