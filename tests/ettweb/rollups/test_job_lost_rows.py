"""The per-job lost rows hold exactly each job rollup's ``lost_gpu_s``: after a refresh,
after a full rebuild, and once the job's events are gone (none left)."""

from __future__ import annotations

import pytest

from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event
from ettweb.rollups.models import JobLostRollup, JobRollup
from ettweb.rollups.rebuild import rebuild_all
from ettweb.rollups.refresh import refresh_jobs


def _rows() -> dict[tuple[str, str], float]:
    return {(r.job_id, r.category): r.gpu_seconds for r in JobLostRollup.objects.all()}


def _from_json() -> dict[tuple[str, str], float]:
    return {(j.job, category): float(gpu_s) for j in JobRollup.objects.all()
            for category, gpu_s in j.lost_gpu_s.items() if gpu_s}


@pytest.mark.django_db
def test_lost_rows_follow_refresh_rebuild_and_removal(worked_example_lines: list[str]) -> None:
    ingest_lines(worked_example_lines)
    refresh_jobs(["j1"])
    assert _rows() == _from_json() and len(_rows()) >= 3  # ETT_SPEC's example loses 33 s
    assert sum(_rows().values()) == pytest.approx(
        JobRollup.objects.get(job="j1").wall_gpu_s - JobRollup.objects.get(job="j1")
        .productive_gpu_s)
    JobLostRollup.objects.all().delete()
    rebuild_all()
    assert _rows() == _from_json()
    Event.objects.filter(job="j1").delete()
    refresh_jobs(["j1"], whole=True)
    assert not JobLostRollup.objects.exists()
