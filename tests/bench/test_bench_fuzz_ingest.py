"""bench.fuzz_ingest runs end to end on a tiny plan against a real worker and prints its JSON
line with exact books (issue 40, part 3; the long profile is the soak-sized run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.slow
def test_bench_fuzz_ingest_small_plan_keeps_exact_books() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz_ingest", "--fuzz-batches", "8", "--job-events",
         "1000", "--big-batch-mib", "0.5", "--database", "ett_bench_fuzz_test"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["profile"] == "short" and result["job_events"] == 1000
    assert result["lost"] == result["duplicated"] == 0
    assert result["quarantined"] == result["quarantined_expected"] > 10  # the big batch's 10
    assert result["quarantined_without_reason"] == 0
    assert result["ingest_errors"] == 0 and result["longest_ingest_task_s"] < 60
    assert 0 < result["worker_pool_peak_rss_mb"] <= result["worker_peak_rss_mb"] < 500
    assert result["meets_targets"] is True


def test_bench_fuzz_ingest_profiles_are_sized_as_issue_40_asks() -> None:
    from bench.fuzz_ingest import PROFILES, big_batch, job_lines, parse_args

    assert PROFILES["long"].job_events >= 1_000_000 and PROFILES["long"].big_batch_mib >= 50
    assert parse_args([]).profile == "short"
    lines, valid = big_batch("j", 1.0)
    assert len(lines) == valid + 10 and sum(map(len, lines)) >= 2**20 * 0.99
    assert len({json.loads(line)["id"] for line in job_lines("j", 300)}) == 300
