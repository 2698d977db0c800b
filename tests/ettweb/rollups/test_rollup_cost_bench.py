"""bench.rollup_cost end to end on a tiny fleet: real COPY load, rebuild, ingest + refresh."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.db import connection

from ettweb.rollups.models import JobRollup

KEYS = {"per_batch_refresh_s", "full_recompute_s", "ratio", "events", "jobs", "batches",
        "batch_size", "jobs_per_batch_median"}


@pytest.mark.django_db
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_rollup_cost_reports_the_ratio_and_drops_its_database() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.rollup_cost", "--jobs", "6", "--batch-size", "40",
         "--batches", "3"],
        capture_output=True, text=True, timeout=200, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) >= KEYS
    assert result["batches"] == 3 and result["batch_size"] == 40
    assert result["jobs"] >= 1 and result["events"] > 120
    assert result["full_recompute_s"] > 0 and result["per_batch_refresh_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["per_batch_refresh_s"] / result["full_recompute_s"])
    with connection.cursor() as cursor:  # dropped at the end, and our database untouched
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = 'ett_bench'")
        assert cursor.fetchone() == (0,)
    assert not JobRollup.objects.exists()

