"""bench.ingest runs end to end on a tiny plan and prints its JSON line (no speed asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_bench_ingest_small_plan_prints_its_result_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ingest", "--events", "1500", "--naive-sample", "50",
         "--concurrency", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["events"] == 1500
    assert result["naive_events"] == 50
    assert result["events_per_s"] > 0 and result["naive_events_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["events_per_s"] / result["naive_events_per_s"], rel=0.02)
    assert result["rollups_current_s"] >= result["seconds"] > 0


def test_bench_ingest_refuses_an_empty_plan() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.ingest", "--events", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--events" in proc.stderr


def test_bench_ingest_takes_another_database_and_a_sweep() -> None:
    """Two benches on one server need distinct databases; ``--sweep`` runs 1, 2 and 4
    worker processes. The defaults stay as they were."""
    from bench.ingest import DATABASE, SWEEP, parse_args

    args = parse_args(["--sweep", "--database", "elsewhere"])
    assert args.sweep and args.database == "elsewhere" and SWEEP == (1, 2, 4)
    default = parse_args([])
    assert default.database == DATABASE == "ett_bench_ingest" and not default.sweep


@pytest.mark.integration
def test_bench_ingest_sweep_prints_a_rate_per_process_count() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ingest", "--sweep", "--events", "600",
         "--database", "ett_bench_ingest_sweep_test"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["events"] == 600
    assert set(result["events_per_s"]) == {"1", "2", "4"}
    assert all(rate > 0 for rate in result["events_per_s"].values())
    assert result["scaling_vs_1"]["1"] == 1.0
