"""bench.rollouts runs end to end on a tiny fleet and prints its JSON line (no speed asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rollouts import percentile, phases, refresh_seconds

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_bench_rollouts_small_fleet_prints_its_result_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.rollouts", "--jobs", "150", "--days", "40",
         "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["jobs"] == 150 and result["days"] == 40
    assert result["events"] > 150 * 10 and result["rollouts"] == 14
    assert result["import_events_per_s"] == pytest.approx(
        result["events"] / result["import_s"], rel=0.01)
    assert 0 < result["refresh_s"] < result["import_s"]  # read from the command's own line
    assert result["impact_requests"] == result["rollout_page_requests"] == 14
    for kind in ("impact", "rollout_page", "component_page"):
        assert 0 < result[f"{kind}_p50_ms"] <= result[f"{kind}_p95_ms"]
    assert isinstance(result["meets_targets"], bool)
    # The floor: every imported event, its id and the rollups, loaded again (how fast is
    # the bench's to report, not this test's to assert; the ratios are its own arithmetic).
    assert result["floor_rows"] > 2 * result["events"]
    assert result["floor_s"] > 0 and result["import_over_floor"] > 0


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_refresh_seconds_are_read_from_the_command_summary() -> None:
    line = ("imported 1 file: 262,212 stored, 0 duplicates, 0 rejected; "
            "4,998 jobs refreshed in 19.7 s")
    assert refresh_seconds(line) == 19.7
    with pytest.raises(ValueError, match="no refresh time"):
        refresh_seconds("imported 1 file: 3 stored, 0 duplicates, 0 rejected")


def test_phases_split_the_import_into_storing_and_refreshing() -> None:
    split = phases(1_000_000, 40.0, 30.0)
    assert split == {"store_s": 10.0, "refresh_s": 30.0, "store_events_per_s": 100_000,
                     "refresh_events_per_s": 33_333, "refresh_share": 0.75}


def test_bench_rollouts_refuses_an_empty_plan() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.rollouts", "--jobs", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--jobs" in proc.stderr


def test_bench_rollouts_takes_another_database() -> None:
    from bench.rollouts import DATABASE, parse_args

    assert parse_args(["--database", "elsewhere"]).database == "elsewhere"
    assert parse_args([]).database == DATABASE == "ett_bench_rollouts"
