"""bench.refresh runs end to end on a small job and prints its JSON line (no speed
asserted); the job it builds is what it says (ranks, one span a minute, stable ids)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.refresh import SLICE_S, START, _first_train_at, job_lines, parse_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_bench_refresh_small_job_prints_its_result_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.refresh", "--quick", "--ranks", "4", "--batches", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [row["age"] for row in result["ages"]] == ["1h", "1d"]
    young, old = result["ages"]
    assert young["events"] < old["events"]  # the job grew between the ages
    assert all(row["median_refresh_s"] > 0 and row["peak_rss_mb"] > 0
               for row in result["ages"])
    assert result["exact"] is True and all(result["checks"].values())
    assert result["refresh_ratio"] == pytest.approx(
        old["median_refresh_s"] / young["median_refresh_s"], rel=0.05)
    assert isinstance(result["meets_target"], bool)
    # A batch reads the chunk it lands in, not the job (at an hour old, four ranks' job is
    # one chunk: a small job's chunk holds up to GROUP_EVENTS events).
    assert max(old["events_read"]) < old["events"] / 2
    stored = result["storage"]
    assert stored["events"] == old["events"] and stored["bytes_per_event"] > 0
    assert stored["chunks"] >= 1 and stored["bytes_per_chunk"] > 0


def test_the_job_is_one_span_per_rank_per_minute_with_stable_ids() -> None:
    ranks = 3
    hour = list(job_lines(ranks, START, START + 3600))
    events = [json.loads(line) for line in hour]
    train = [e for e in events if e.get("phase") == "train"]
    minutes = int((START + 3600 - _first_train_at()) // SLICE_S)
    assert len(train) == ranks * minutes
    assert {e["rank"] for e in train} == {0, 1, 2}
    assert all(e["end"] - e["start"] == SLICE_S for e in train)
    # Loading the next range continues where this one stopped: no gap, no overlap.
    nxt = [json.loads(line) for line in job_lines(ranks, START + 3600, START + 7200)]
    assert {e["id"] for e in nxt}.isdisjoint(e["id"] for e in events)
    assert min(e["start"] for e in nxt if e["kind"] == "span") == max(
        e["start"] for e in train) + SLICE_S
    assert list(job_lines(ranks, START, START + 3600)) == hour  # ids and lines stable
    # A heartbeat per slice, half way through it, with the step reached by then (§3 rule 3).
    beats = [e for e in events if e.get("mark") == "heartbeat"]
    assert len(beats) == len(train)
    assert all(any(b["rank"] == t["rank"] and b["ts"] == t["start"] + SLICE_S / 2
                   and t["step_start"] < b["step"] < t["step_end"] for t in train)
               for b in beats)
    assert not [e for e in job_lines(ranks, START, START + 3600, heartbeats=False)
                if '"heartbeat"' in e]


def test_bench_refresh_refuses_ages_out_of_order() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--ages", "1d", "1h"])
