"""``python -m bench.attribution`` runs end to end on a tiny plan; its last line is the
JSON the lead compares across commits (no speed is asserted: this machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"events", "jobs", "engine_events_per_s", "report_events_per_s", "engine_target_met"}
ROLLUP_KEYS = {"rollup_refresh_s_per_batch", "full_recompute_s", "refresh_over_full_ratio"}


def test_quick_no_db_run_ends_with_the_json_summary() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.attribution", "--quick", "--no-db", "--jobs", "6",
         "--seed", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert set(summary) >= KEYS
    assert not ROLLUP_KEYS & set(summary)  # --no-db: the rollup part is skipped
    assert summary["jobs"] == 6
    assert summary["events"] > 6 * 100
    assert summary["engine_events_per_s"] > 0 and summary["report_events_per_s"] > 0
    assert 0.0 <= summary["fleet_ett_pct"] <= 100.0
    assert any("offline engine" in line for line in lines[:-1])  # the human table


def test_bad_plan_is_refused_with_a_reason() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.attribution", "--no-db", "--jobs", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode != 0
    assert "--jobs" in done.stderr
