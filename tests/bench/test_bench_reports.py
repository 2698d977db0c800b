"""bench.reports runs end to end on a tiny fleet and prints its JSON line (no speed asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.reports import parse_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_bench_reports_small_run_prints_its_result_line() -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.reports", "--jobs", "120", "--days", "30",
         "--subscribers", "12", "--uncached", "3", "--repeats", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["subscribers"] == result["sent"] == 12
    assert result["exactly_once"] is True
    assert result["chart_ms"] > 0 and result["cached_ms_per_report"] > 0
    assert result["cache_speedup"] == pytest.approx(
        result["uncached_ms_per_report"] / result["cached_ms_per_report"], rel=0.05)
    assert isinstance(result["meets_targets"], bool)


def test_bench_reports_refuses_an_impossible_plan(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--subscribers", "5", "--uncached", "6"])
    assert "--uncached cannot exceed --subscribers" in capsys.readouterr().err
