"""THE "done when" test: rollups written by ingestion equal ``python -m ettweb.attribution``.

The same JSONL lines go (a) to the offline report's CLI in a subprocess and (b) through the
Celery task's code path in shuffled batches; every number of every job, the fleet totals and
the sub-metrics must agree.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum
from rollup_fleet import fleet

from collector.schema import parse_event
from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS, component_of
from ettweb.attribution.engine import attribute
from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import DateRange, LostByComponentQuery, TrendQuery, calculate
from ettweb.rollups.models import DailyCategoryRollup, JobRollup, RecoveryRollup

pytestmark = pytest.mark.django_db
REL = 1e-9


def _offline_report(lines: list[str], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run([sys.executable, "-m", "ettweb.attribution", str(path)],
                          capture_output=True, text=True, check=True, timeout=120)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _ingest_shuffled(lines: list[str], seed: int, batch: int = 37) -> None:
    shuffled = list(lines)
    random.Random(seed).shuffle(shuffled)
    for at in range(0, len(shuffled), batch):
        ingest_batch(shuffled[at:at + batch], source="test")


@pytest.fixture
def fleet_lines() -> list[str]:
    lines = fleet(seed=11, jobs=10).lines()
    return lines + lines[:25]  # resent events count once


def _approx(value: float) -> Any:
    return pytest.approx(value, rel=REL, abs=1e-6)


def test_every_job_number_equals_the_offline_report(fleet_lines: list[str],
                                                    tmp_path: Path) -> None:
    report = _offline_report(fleet_lines, tmp_path)
    _ingest_shuffled(fleet_lines, seed=3)
    rollups = {r.job: r for r in JobRollup.objects.all()}
    assert sorted(rollups) == [entry["job"] for entry in report["jobs"]]
    # The fleet exercises what is compared: failures with recoveries, repeated steps, a job
    # still running, anomalies.
    assert sum(entry["failures"] for entry in report["jobs"]) >= 3
    assert sum(len(entry["time_to_recover_s"]) for entry in report["jobs"]) >= 3
    assert any(entry["repeated_steps"] for entry in report["jobs"])
    assert "running" in {row.status for row in rollups.values()}
    engine = {job.job: job for job in attribute(parse_event(line) for line in fleet_lines).jobs}
    for entry in report["jobs"]:
        row = rollups[entry["job"]]
        assert row.attempts == entry["attempts"]
        for name in ("wall_s", "productive_s", "wall_gpu_s", "productive_gpu_s"):
            assert getattr(row, name) == _approx(entry[name]), name
        assert round(row.ett_pct, 2) == entry["ett_pct"]
        assert row.repeated_steps == entry["repeated_steps"]
        assert row.failures == entry["failures"]
        if entry["time_to_start_s"] is None:
            assert row.time_to_start_s is None
        else:
            assert row.time_to_start_s == _approx(entry["time_to_start_s"])
        assert row.lost_s == {k: _approx(v) for k, v in entry["lost_s"].items()}
        recovered = RecoveryRollup.objects.filter(job_id=row.job).order_by("attempt")
        assert [r.seconds for r in recovered] == [_approx(v) for v in entry["time_to_recover_s"]]
        expected = engine[row.job]
        assert row.anomalies == expected.anomalies
        assert [(r.attempt, r.by_category) for r in recovered] == [
            (x.attempt, {k: _approx(v) for k, v in x.by_category.items() if v})
            for x in expected.recoveries]


def test_day_rows_sum_to_each_jobs_totals(fleet_lines: list[str], tmp_path: Path) -> None:
    report = _offline_report(fleet_lines, tmp_path)
    _ingest_shuffled(fleet_lines, seed=4)
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    days: set[date] = set()
    for row in DailyCategoryRollup.objects.all():
        seconds[row.job_id][row.category] += row.seconds
        days.add(row.day)
    assert len(days) >= 4  # the fleet spans several UTC days
    for entry in report["jobs"]:
        by_category = seconds[entry["job"]]
        assert by_category.pop("productive", 0.0) == _approx(entry["productive_s"])
        assert dict(by_category) == {k: _approx(v) for k, v in entry["lost_s"].items()}
        by_component: dict[str, float] = defaultdict(float)
        for category, value in by_category.items():
            by_component[component_of(category, DEFAULT_PHASE_COMPONENTS)] += value
        assert dict(by_component) == {k: _approx(v)
                                      for k, v in entry["lost_by_component_s"].items() if v}


def test_fleet_numbers_from_day_rollups_equal_the_report(fleet_lines: list[str],
                                                         tmp_path: Path) -> None:
    report = _offline_report(fleet_lines, tmp_path)
    _ingest_shuffled(fleet_lines, seed=5)
    whole = DateRange(date(2026, 1, 1), date(2026, 12, 31))
    trend = calculate(TrendQuery(whole, interval="week"))
    assert trend.wall_gpu_s == _approx(report["fleet"]["wall_gpu_s"])
    assert trend.productive_gpu_s == _approx(report["fleet"]["productive_gpu_s"])
    assert round(trend.ett_pct, 2) == report["fleet"]["ett_pct"]
    totals = JobRollup.objects.aggregate(wall=Sum("wall_gpu_s"), productive=Sum("productive_gpu_s"))
    assert totals["wall"] == _approx(report["fleet"]["wall_gpu_s"])
    lost = calculate(LostByComponentQuery(whole))
    fleet_lost = report["fleet"]["wall_gpu_s"] - report["fleet"]["productive_gpu_s"]
    assert sum(c.gpu_s for c in lost.components) == _approx(fleet_lost)
    engine = attribute(parse_event(line) for line in fleet_lines)
    expected: dict[str, float] = defaultdict(float)
    for category, gpu_s in engine.lost_gpu_s.items():
        expected[component_of(category, DEFAULT_PHASE_COMPONENTS)] += gpu_s
    assert {c.component: c.gpu_s for c in lost.components} == {
        k: _approx(v) for k, v in expected.items()}
