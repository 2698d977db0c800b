"""The fleet's day sums and the job-day sums stay equal to the day rows through every way
rollups change: refreshes, late events, batches in random order, concurrent workers, jobs
removed, a rebuild."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from datetime import date

import pytest
from django.db import connections
from rollup_fleet import EPOCH, FleetBuilder, fleet

from ettweb.ingest.logic import ingest_lines
from ettweb.rollups.logic import (
    SumDrift,
    day_sum_drift,
    rebuild_all,
    refresh_jobs,
    remove_jobs,
)
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
)

HOUR = 3600.0


def _job_of(line: str) -> str:
    return str(json.loads(line)["job"])


def _jobs() -> list[str]:
    return sorted(JobRollup.objects.values_list("job", flat=True))


def _fleet_cells() -> dict[tuple[date, str], float]:
    return {(r.day, r.category): r.gpu_seconds for r in FleetDayRollup.objects.all()}


def _summed_day_rows() -> dict[tuple[date, str], float]:
    sums: dict[tuple[date, str], float] = defaultdict(float)
    for day, category, gpu_s in DailyCategoryRollup.objects.values_list("day", "category",
                                                                         "gpu_seconds"):
        sums[(day, category)] += gpu_s
    return dict(sums)


def _assert_sums_exact() -> None:
    assert day_sum_drift() == SumDrift(0, 0)
    cells, fresh = _fleet_cells(), _summed_day_rows()
    assert set(cells) == set(fresh)
    for key, value in fresh.items():
        assert cells[key] == pytest.approx(value, rel=1e-12)
    job_days = {(r.job_id, r.day): (r.wall_gpu_seconds, r.productive_gpu_seconds)
                for r in JobDayRollup.objects.all()}
    assert set(job_days) == set(DailyCategoryRollup.objects.values_list("job_id", "day"))


@pytest.mark.django_db
def test_sums_follow_refreshes_late_events_and_removals() -> None:
    lines = fleet(seed=11, jobs=10).lines()
    ingest_lines(lines[: len(lines) // 2])
    refresh_jobs(_jobs())
    _assert_sums_exact()
    ingest_lines(lines[len(lines) // 2:])
    refresh_jobs({_job_of(line) for line in lines})
    _assert_sums_exact()
    assert FleetDayRollup.objects.exists()

    # The check itself sees a day row changed behind the upkeep's back.
    row = DailyCategoryRollup.objects.filter(category="productive").first()
    assert row is not None
    DailyCategoryRollup.objects.filter(pk=row.pk).update(gpu_seconds=row.gpu_seconds + 1.0)
    assert day_sum_drift() == SumDrift(1, 1)
    DailyCategoryRollup.objects.filter(pk=row.pk).update(gpu_seconds=row.gpu_seconds)
    _assert_sums_exact()

    gone = _jobs()[:4]
    assert remove_jobs(gone) == 4
    _assert_sums_exact()
    remove_jobs(_jobs())
    # Exact upkeep: every cell reached exactly zero and was deleted, no float ghosts left.
    assert not FleetDayRollup.objects.exists() and not JobDayRollup.objects.exists()


@pytest.mark.django_db
def test_a_job_whose_events_are_gone_leaves_the_sums() -> None:
    b = FleetBuilder()
    b.mark("short", 0, "attempt_start", EPOCH, attrs={"gpus": 4})
    b.span("short", 0, "train", EPOCH, EPOCH + 2 * HOUR, step_start=0, step_end=10)
    ingest_lines(b.lines())
    refresh_jobs(["short"])
    assert _fleet_cells() == {(date(2026, 3, 1), "productive"): 8 * HOUR}
    row = JobDayRollup.objects.get()
    assert (row.wall_gpu_seconds, row.productive_gpu_seconds) == (8 * HOUR, 8 * HOUR)
    from ettweb.simulate.store import _delete_events  # the events of a job, deleted

    _delete_events(["short"])
    refresh_jobs(["short"])
    assert not FleetDayRollup.objects.exists() and not JobDayRollup.objects.exists()


@pytest.mark.django_db
def test_random_batches_in_random_order_keep_the_sums_exact() -> None:
    """Batches of a fleet arrive shuffled (late ones days back included), each followed by
    a refresh of the jobs it touched; the sums equal the day rows after every one."""
    rng = random.Random(3)
    lines = fleet(seed=23, jobs=8).lines()
    rng.shuffle(lines)
    at = 0
    while at < len(lines):
        size = rng.randint(1, 40)
        batch = lines[at:at + size]
        at += size
        ingest_lines(batch)
        refresh_jobs({_job_of(line) for line in batch})
        assert day_sum_drift() == SumDrift(0, 0)
    _assert_sums_exact()
    before = _fleet_cells()
    rebuild_all()
    _assert_sums_exact()
    after = _fleet_cells()
    assert set(after) == set(before)
    for key, value in before.items():
        assert after[key] == pytest.approx(value, rel=1e-12)


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshes_sharing_days_keep_the_sums_exact() -> None:
    """Two workers refresh different jobs whose days overlap (the fleet's cells are shared)
    round after round: no deadlock, no lost update."""
    lines = fleet(seed=9, jobs=6).lines()
    by_job: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        by_job[_job_of(line)].append(line)
    jobs = sorted(by_job)
    halves = [jobs[0::2], jobs[1::2]]
    rounds = 6
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(mine: list[str]) -> None:
        try:
            mine_lines = [line for job in mine for line in by_job[job]]
            chunk = -(-len(mine_lines) // rounds)
            for at in range(0, len(mine_lines), chunk):
                ingest_lines(mine_lines[at:at + chunk])
                barrier.wait(timeout=30)
                refresh_jobs(mine)
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(half,)) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    _assert_sums_exact()
