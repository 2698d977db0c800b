"""The fleet's day sums and the job-day sums stay equal to the day rows through every way
rollups change: refreshes, late events, batches in random order, concurrent workers, jobs
removed, a rebuild."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from rollup_fleet import EPOCH, FleetBuilder, fleet, in_lockstep

from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.audit import SumDrift, day_sum_drift
from ettweb.rollups.buckets import bucket_sql, gpu_bucket
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
    ScopeTotalRollup,
)
from ettweb.rollups.rebuild import rebuild_all
from ettweb.rollups.refresh import refresh_jobs
from ettweb.rollups.removal import remove_jobs

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


def _label_cells() -> dict[tuple[Any, ...], float]:
    return {(r.day, r.category, r.model, r.team, r.cluster, r.gpus): r.gpu_seconds
            for r in LabelDayRollup.objects.all()}


def _summed_by_labels() -> dict[tuple[Any, ...], float]:
    """The day rows grouped by their job's labels and GPU bucket, worked out here."""
    jobs = {r.job: (r.model, r.team, r.cluster, gpu_bucket(r.gpus))
            for r in JobRollup.objects.all()}
    sums: dict[tuple[Any, ...], float] = defaultdict(float)
    for job, day, category, gpu_s in DailyCategoryRollup.objects.values_list(
            "job_id", "day", "category", "gpu_seconds"):
        sums[(day, category, *jobs[job])] += gpu_s
    return dict(sums)


def _assert_sums_exact() -> None:
    assert day_sum_drift() == SumDrift(0, 0, 0, 0)
    labels, by_labels = _label_cells(), _summed_by_labels()
    assert set(labels) == set(by_labels)
    for key, value in by_labels.items():
        assert labels[key] == pytest.approx(value, rel=1e-12)
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
    assert day_sum_drift() == SumDrift(1, 1, 1, 1)
    DailyCategoryRollup.objects.filter(pk=row.pk).update(gpu_seconds=row.gpu_seconds)
    _assert_sums_exact()

    gone = _jobs()[:4]
    assert remove_jobs(gone) == 4
    _assert_sums_exact()
    remove_jobs(_jobs())
    # Exact upkeep: every cell reached exactly zero and was deleted, no float ghosts left.
    assert not FleetDayRollup.objects.exists() and not JobDayRollup.objects.exists()
    assert not ScopeTotalRollup.objects.exists()
    assert not LabelDayRollup.objects.exists()


@pytest.mark.django_db
def test_a_job_whose_labels_change_moves_all_its_sums() -> None:
    """A job's labels and GPUs are its last attempt's: a second attempt on another team and
    size moves the first attempt's days too, out of the old key's sums."""
    b = FleetBuilder()
    b.mark("mover", 0, "attempt_start", EPOCH, attrs={"gpus": 4, "team": "ads", "model": "m"})
    b.span("mover", 0, "train", EPOCH, EPOCH + 2 * HOUR, step_start=0, step_end=10)
    b.mark("stay", 0, "attempt_start", EPOCH, attrs={"gpus": 4, "team": "ads", "model": "m"})
    b.span("stay", 0, "train", EPOCH, EPOCH + HOUR, step_start=0, step_end=10)
    ingest_lines(b.lines())
    refresh_jobs(["mover", "stay"])
    day = date(2026, 3, 1)
    assert _label_cells() == {(day, "productive", "m", "ads", "", "2-8"): 12 * HOUR}
    later = FleetBuilder()
    later.mark("mover", 0, "attempt_end", EPOCH + 2 * HOUR, attrs={"status": "failed"})
    later.mark("mover", 1, "attempt_start", EPOCH + 3 * HOUR,
               attrs={"gpus": 16, "team": "feed", "model": "m"})
    later.span("mover", 1, "train", EPOCH + 3 * HOUR, EPOCH + 4 * HOUR, step_start=10,
               step_end=20)
    for n, event in enumerate(later.events):
        event["id"] = f"later-{n}"
    ingest_lines(later.lines())
    refresh_jobs(["mover"])
    _assert_sums_exact()
    cells = _label_cells()
    assert cells[(day, "productive", "m", "ads", "", "2-8")] == 4 * HOUR  # stay alone
    moved = {key: v for key, v in cells.items() if key[3] == "feed"}
    assert {key[5] for key in moved} == {"9-64"}
    assert sum(moved.values()) == pytest.approx(
        sum(DailyCategoryRollup.objects.filter(job_id="mover").values_list("gpu_seconds",
                                                                            flat=True)))


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
    refresh_jobs(["short"], whole=True)
    assert not FleetDayRollup.objects.exists() and not JobDayRollup.objects.exists()
    assert not ScopeTotalRollup.objects.exists()


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
        assert day_sum_drift() == SumDrift(0, 0, 0, 0)
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

    def worker(mine: list[str]) -> Callable[[threading.Barrier], None]:
        def body(barrier: threading.Barrier) -> None:
            mine_lines = [line for job in mine for line in by_job[job]]
            chunk = -(-len(mine_lines) // rounds)
            for at in range(0, len(mine_lines), chunk):
                ingest_lines(mine_lines[at:at + chunk])
                barrier.wait(timeout=30)
                refresh_jobs(mine)
        return body

    errors = in_lockstep([worker(half) for half in halves])
    assert not errors, errors
    _assert_sums_exact()


def test_the_migration_buckets_gpus_as_the_code_does() -> None:
    """Migration 0008 filled the label sums with the buckets frozen in its SQL: they must be
    the buckets the upkeep and the rebuild use."""
    import importlib

    migration = importlib.import_module("ettweb.rollups.migrations.0008_label_day_sums")
    assert bucket_sql("j.gpus") in migration.LABEL_DAY_SUMS
