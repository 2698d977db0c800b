"""refresh_jobs / rebuild_all on real Postgres: exact, day-precise, safe under concurrency."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import pytest
from django.db import connection
from rollup_fleet import EPOCH, FleetBuilder, fleet, in_lockstep

from collector.schema import dump_event
from ettweb.attribution.engine import attribute_job
from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.models import AttemptRollup, DailyCategoryRollup, JobRollup, RecoveryRollup
from ettweb.rollups.rebuild import rebuild_all
from ettweb.rollups.refresh import load_events, refresh_jobs
from tests.ettweb.db_sessions import start_session

HOUR = 3600.0
DAY = 86400.0
DAY0 = date(2026, 3, 1)  # the UTC day of EPOCH


def _ingest(builder: FleetBuilder) -> None:
    ingest_lines(builder.lines())


def _five_day_job() -> FleetBuilder:
    """One running job training in 6 h slices for five UTC days, with a 2 h hole on day 2
    (2026-03-03 06:00-08:00) that nobody reported: unattributed time."""
    b = FleetBuilder()
    b.mark("long", 0, "attempt_start", EPOCH, attrs={"gpus": 8})
    step = 0
    t = EPOCH
    while t < EPOCH + 5 * DAY:
        start = t + 2 * HOUR if t == EPOCH + 2 * DAY + 6 * HOUR else t
        b.span("long", 0, "train", start, t + 6 * HOUR, step_start=step, step_end=step + 100)
        step += 100
        t += 6 * HOUR
    return b


def _day_rows(job: str) -> dict[tuple[date, str], tuple[int, float, float, Any]]:
    return {(r.day, r.category): (r.pk, r.seconds, r.gpu_seconds, r.written_at)
            for r in DailyCategoryRollup.objects.filter(job_id=job)}


@pytest.mark.django_db
def test_late_event_rewrites_only_the_day_it_touches() -> None:
    job = _five_day_job()
    _ingest(job)
    first = refresh_jobs(["long"])
    assert first.days_written == tuple(DAY0 + timedelta(days=d) for d in range(5))
    before = _day_rows("long")
    day2 = DAY0 + timedelta(days=2)
    # Hand-computed: day 2 is 22 h productive + 2 h unattributed, x 8 GPUs.
    assert before[(day2, "unattributed")][1:3] == (2 * HOUR, 16 * HOUR)
    assert before[(day2, "productive")][1:3] == (22 * HOUR, 176 * HOUR)

    late = FleetBuilder()
    late.span("long", 0, "compile", EPOCH + 2 * DAY + 6 * HOUR, EPOCH + 2 * DAY + 7 * HOUR)
    late.events[0]["id"] = "late-compile"
    ingest_lines([dump_event(late.events[0])])
    stats = refresh_jobs(["long"])

    assert stats.days_written == (day2,)
    assert (stats.day_rows_written, stats.day_rows_deleted) == (2, 0)  # compile new, unattr.
    after = _day_rows("long")
    for key, row in before.items():
        if key[0] != day2:
            assert after[key] == row  # same id, numbers and written_at: not rewritten
    assert after[(day2, "compile")][1:3] == (HOUR, 8 * HOUR)
    assert after[(day2, "unattributed")][1:3] == (HOUR, 8 * HOUR)
    assert after[(day2, "productive")] == before[(day2, "productive")]


@pytest.mark.django_db
def test_refresh_writes_job_attempt_and_recovery_rows_like_the_engine(
        worked_example_lines: list[str]) -> None:
    ingest_lines(worked_example_lines)
    stats = refresh_jobs(["j1"])
    assert (stats.jobs, stats.events) == (1, len(worked_example_lines))
    row = JobRollup.objects.get(job="j1")
    # ETT_SPEC §3 worked example.
    assert (row.wall_s, row.productive_s, row.wall_gpu_s, row.productive_gpu_s) == (
        113.0, 80.0, 452.0, 320.0)
    assert round(row.ett_pct, 2) == 70.80
    assert (row.time_to_start_s, row.failures, row.repeated_steps) == (10.0, 1, 80)
    assert (row.model, row.team, row.status, row.gpus) == ("dlrm", "ads", "completed", 4)
    assert [(a.attempt, a.start, a.end, a.status, a.gpus)
            for a in AttemptRollup.objects.filter(job_id="j1").order_by("attempt")] == [
        (0, 1000.0, 1083.0, "failed", 4), (1, 1090.0, 1113.0, "completed", 4)]
    recovery = RecoveryRollup.objects.get(job_id="j1")
    # 1080 -> 1101: failure 3 s, restart_gap 7 s, checkpoint_load 3 s, repeated 8 s.
    assert (recovery.attempt, recovery.start, recovery.end, recovery.seconds) == (
        0, 1080.0, 1101.0, 21.0)
    assert recovery.by_category == pytest.approx(
        {"failure": 3.0, "restart_gap": 7.0, "checkpoint_load": 3.0, "repeated_training": 8.0})
    assert recovery.by_category_gpu == pytest.approx(
        {"failure": 12.0, "restart_gap": 28.0, "checkpoint_load": 12.0,
         "repeated_training": 32.0})
    assert recovery.day == date(1970, 1, 1)


@pytest.mark.django_db
def test_a_running_job_shows_live_numbers_batch_after_batch() -> None:
    b = FleetBuilder()
    b.mark("live", 0, "attempt_start", EPOCH, attrs={"gpus": 2})
    b.span("live", 0, "train", EPOCH, EPOCH + 60, step_start=0, step_end=60)
    ingest_lines(b.lines())
    refresh_jobs(["live"])
    assert JobRollup.objects.get(job="live").wall_s == 60.0
    more = FleetBuilder()
    more.span("live", 0, "train", EPOCH + 60, EPOCH + 120, step_start=60, step_end=120)
    more.events[0]["id"] = "slice-2"
    ingest_lines(more.lines())
    refresh_jobs(["live"])
    row = JobRollup.objects.get(job="live")
    assert (row.status, row.wall_s, row.productive_gpu_s) == ("running", 120.0, 240.0)


@pytest.mark.django_db
def test_rebuild_all_equals_incremental_refresh() -> None:
    builder = fleet(seed=21, jobs=6)
    lines = builder.lines()
    for at in range(0, len(lines), 50):
        refresh_jobs(ingest_lines(lines[at:at + 50]).jobs)
    incremental = _snapshot()
    stats = rebuild_all()
    assert stats.jobs == 6 and stats.events == len(lines)
    assert _snapshot() == incremental


@pytest.mark.django_db
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batches_in_random_order_refresh_every_job_exactly(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded fleet's events in shuffled batches (late ones everywhere), refreshed
    after each batch through Postgres: every job, day x category and recovery equals the
    engine from scratch. Small chunks (``GROUP_EVENTS`` 5) so jobs span many of them."""
    import random

    from ettweb.attribution import chunk_refresh
    from ettweb.attribution.chunk_sums import day_values

    monkeypatch.setattr(chunk_refresh, "GROUP_EVENTS", 5)
    lines = fleet(seed=seed, jobs=5).lines()
    rng = random.Random(seed)
    rng.shuffle(lines)
    at = 0
    while at < len(lines):
        size = rng.randint(1, 40)
        refresh_jobs(ingest_lines(lines[at:at + size]).jobs)
        at += size
    events = load_events(sorted(JobRollup.objects.values_list("job", flat=True)))
    assert len(events) == 5
    for job, job_events in events.items():
        whole = attribute_job(job_events)
        row = JobRollup.objects.get(job=job)
        assert (row.wall_gpu_s, row.productive_gpu_s) == (
            pytest.approx(whole.wall_gpu_s, rel=1e-9), pytest.approx(whole.productive_gpu_s,
                                                                     rel=1e-9))
        assert row.lost_gpu_s == pytest.approx(whole.lost_gpu_s, rel=1e-9)
        assert (row.repeated_steps, row.failures, row.anomalies) == (
            whole.repeated_steps, whole.failures, whole.anomalies)
        stored = {(d, c): (sec, g) for d, c, sec, g in DailyCategoryRollup.objects.filter(
            job_id=job).values_list("day", "category", "seconds", "gpu_seconds")}
        wanted = day_values(whole)
        assert set(stored) == set(wanted)
        assert all(stored[key] == pytest.approx(value, rel=1e-9)
                   for key, value in wanted.items())
        recoveries = list(RecoveryRollup.objects.filter(job_id=job).order_by("attempt"))
        assert [(r.attempt, r.start, r.end) for r in recoveries] == [
            (r.attempt, r.start, r.end) for r in whole.recoveries]
        for mine, theirs in zip(recoveries, whole.recoveries, strict=True):
            assert mine.by_category_gpu == pytest.approx(
                {k: v for k, v in theirs.by_category_gpu_s.items() if v}, rel=1e-9)


def _snapshot() -> dict[str, Any]:
    def approx_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [tuple(pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in row)
                for row in rows]

    return {
        "jobs": approx_rows(list(JobRollup.objects.order_by("job").values_list(
            "job", "wall_s", "productive_gpu_s", "ett_pct", "attempts", "status", "failures",
            "time_to_start_s", "repeated_steps"))),
        "days": approx_rows(list(DailyCategoryRollup.objects.order_by(
            "job", "day", "category").values_list("job", "day", "category", "seconds",
                                                 "gpu_seconds"))),
        "attempts": list(AttemptRollup.objects.order_by("job", "attempt").values_list(
            "job", "attempt", "status", "gpus")),
        "recoveries": approx_rows(list(RecoveryRollup.objects.order_by(
            "job", "attempt").values_list("job", "attempt", "seconds", "day"))),
    }


@pytest.mark.django_db
def test_a_job_whose_events_are_gone_loses_its_rollups(worked_example_lines: list[str]) -> None:
    refresh_jobs(ingest_lines(worked_example_lines).jobs)
    assert DailyCategoryRollup.objects.filter(job_id="j1").exists()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ingest_event WHERE job = 'j1'")
    assert refresh_jobs(["j1", "never-seen"], whole=True).jobs == 0
    assert not JobRollup.objects.exists() and not DailyCategoryRollup.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshes_of_one_job_are_safe_and_end_exact() -> None:
    """Two workers ingest different slices of one job and refresh it at the same moment,
    round after round; no conflict error, and the final rollup equals the engine's."""
    builder = fleet(seed=5, jobs=1)
    lines = builder.lines()
    halves = [lines[0::2], lines[1::2]]
    rounds = 8

    def worker(mine: list[str]) -> Callable[[threading.Barrier], None]:
        def body(barrier: threading.Barrier) -> None:
            chunk = -(-len(mine) // rounds)
            for at in range(0, len(mine), chunk):
                ingest_lines(mine[at:at + chunk])
                barrier.wait(timeout=30)
                refresh_jobs(["job-000"])
        return body

    errors = in_lockstep([worker(half) for half in halves])
    assert not errors, errors
    expected = attribute_job(load_events(["job-000"])["job-000"])
    row = JobRollup.objects.get(job="job-000")
    assert row.events == len(lines)
    assert row.wall_gpu_s == pytest.approx(expected.wall_gpu_s, rel=1e-12)
    assert row.productive_gpu_s == pytest.approx(expected.productive_gpu_s, rel=1e-12)
    days = sum(DailyCategoryRollup.objects.filter(job_id="job-000")
               .values_list("gpu_seconds", flat=True))
    assert days == pytest.approx(expected.wall_gpu_s, rel=1e-9)


@pytest.mark.django_db(transaction=True)
def test_a_slow_refresh_never_overwrites_a_newer_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker A reads the job's events, then stalls; meanwhile a batch commits and worker B
    refreshes. Without the per-job lock A would write its stale numbers last."""
    import ettweb.rollups.refresh as refresh

    builder = fleet(seed=9, jobs=1)
    lines = builder.lines()
    ingest_lines(lines[:-10])
    loaded = threading.Event()
    real = refresh._refresh_job

    def slow_attribute(*args: Any) -> Any:
        rows = real(*args)  # the job's chunks read and attributed, nothing written yet
        if threading.current_thread().name == "slow":
            loaded.set()
            threading.Event().wait(1.0)  # B gets every chance to finish first
        return rows

    monkeypatch.setattr(refresh, "_refresh_job", slow_attribute)
    errors: list[BaseException] = []

    def run_slow() -> None:
        refresh_jobs(["job-000"])

    slow = start_session(run_slow, errors, name="slow")
    assert loaded.wait(timeout=30)
    ingest_lines(lines[-10:])
    fast = start_session(run_slow, errors, name="fast")
    slow.join(timeout=60)
    fast.join(timeout=60)
    assert not errors, errors
    assert JobRollup.objects.get(job="job-000").events == len(lines)
