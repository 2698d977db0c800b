"""Dirty-job marks: one refresh per burst of batches, and no batch ever left out of a
refresh, even when it commits while the refresh runs (real Postgres, real threads)."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from rollup_fleet import fleet

from ettweb.ingest.batches import ingest_lines
from ettweb.rollups import chunk_store
from ettweb.rollups.marks import mark_dirty, stale_marks
from ettweb.rollups.models import DirtyChunk, DirtyJob, JobRollup
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.db_sessions import start_session


@pytest.mark.django_db
def test_mark_dirty_asks_for_a_refresh_once_per_mark_and_again_when_stale() -> None:
    assert mark_dirty(["b", "a", "a"], now=100.0, stale_after_s=60.0) == ["a", "b"]
    assert mark_dirty(["a"], now=120.0, stale_after_s=60.0) == []  # its refresh is pending
    assert mark_dirty(["a", "c"], now=161.0, stale_after_s=60.0) == ["a", "c"]  # a: lost task
    assert DirtyJob.objects.get(job="a").marked_at == 161.0  # re-armed by its new schedule
    assert DirtyJob.objects.get(job="b").marked_at == 100.0  # untouched: still stale
    assert stale_marks(older_than=101.0) == ["b"]


@pytest.mark.django_db
def test_a_backed_up_refresh_is_scheduled_again_once_per_stale_period_not_per_batch() -> None:
    """The refresh queue is five minutes behind and a batch of job ``a`` arrives every
    second: one new refresh per minute of waiting, not one per batch."""
    scheduled = [t for t in range(300) if mark_dirty(["a"], now=float(t), stale_after_s=60.0)]
    assert scheduled == [0, 61, 122, 183, 244]


@pytest.mark.django_db
def test_only_marked_refresh_skips_a_job_another_refresh_took(
        worked_example_lines: list[str]) -> None:
    result = ingest_lines(worked_example_lines)
    assert result.refresh == ("j1",) and DirtyJob.objects.filter(job="j1").exists()
    assert refresh_jobs(["j1"], only_marked=True).jobs == 1
    assert not DirtyJob.objects.exists()
    assert refresh_jobs(["j1"], only_marked=True).jobs == 0  # a duplicate task: no work
    assert round(JobRollup.objects.get(job="j1").ett_pct, 2) == 70.80


@pytest.mark.django_db
def test_a_plain_refresh_clears_the_mark_too(worked_example_lines: list[str]) -> None:
    ingest_lines(worked_example_lines)
    refresh_jobs(["j1"])
    assert not DirtyJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_committing_during_a_refresh_is_never_left_out() -> None:
    """Batch 2 holds its job's mark (uncommitted) when the refresh starts: the refresh waits
    for it, then reads both batches. Nothing is marked afterwards, and the rollup is exact."""
    lines = fleet(seed=3, jobs=1).lines()
    first, second = lines[:-20], lines[-20:]
    ingest_lines(first)  # committed and marked; its refresh not yet run
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_batch() -> None:
        with transaction.atomic():
            ingest_lines(second)  # stores and locks the mark, inside the open transaction
            holding.set()
            assert release.wait(timeout=30)

    refreshed: list[int] = []
    batch = start_session(slow_batch, errors)
    assert holding.wait(timeout=30)
    refresher = start_session(
        lambda: refreshed.append(refresh_jobs(["job-000"], only_marked=True).events), errors)
    refresher.join(timeout=1.0)
    assert refresher.is_alive()  # waiting on the mark's row lock, not reading stale events
    release.set()
    batch.join(timeout=30)
    refresher.join(timeout=30)
    assert not errors, errors
    assert refreshed == [len(lines)]
    assert JobRollup.objects.get(job="job-000").events == len(lines)
    assert not DirtyJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_committing_after_the_refresh_claimed_the_mark_marks_the_job_again() -> None:
    lines = fleet(seed=4, jobs=1).lines()
    ingest_lines(lines[:-20])
    claimed, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def refresh_that_stalls() -> None:
        import ettweb.rollups.refresh as refresh

        real = refresh._refresh_job
        try:
            def load_after_batch(*args: object) -> object:
                claimed.set()
                assert release.wait(timeout=30)
                return real(*args)  # type: ignore[arg-type]

            refresh._refresh_job = load_after_batch  # type: ignore[assignment]
            refresh_jobs(["job-000"], only_marked=True)
        except BaseException as exc:
            errors.append(exc)
        finally:
            refresh._refresh_job = real
            connections.close_all()

    refresher = threading.Thread(target=refresh_that_stalls)
    refresher.start()
    assert claimed.wait(timeout=30)
    done: list[tuple[str, ...]] = []
    batch = threading.Thread(target=lambda: (done.append(ingest_lines(lines[-20:]).refresh),
                                             connections.close_all()))
    batch.start()  # blocks on the claimed (deleted, uncommitted) mark until the refresh ends
    release.set()
    refresher.join(timeout=30)
    batch.join(timeout=30)
    assert not errors, errors
    assert done == [("job-000",)]  # newly marked: its own refresh gets scheduled
    assert refresh_jobs(["job-000"], only_marked=True).jobs == 1
    assert JobRollup.objects.get(job="job-000").events == len(lines)


@pytest.mark.django_db
def test_the_refresh_wait_stretches_with_the_waiting_jobs_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One round over the waiting jobs may cost a quarter of a worker: 3 waiting jobs whose
    refreshes read a chunk of 100,000 events each, at 20 us an event, is 6 s of refreshing,
    so each waits 24 s, not 5 s. A job's refresh reads one chunk, not the job: a job of 4M
    events in 400 chunks costs as much as one of 10,000 in one."""
    from ettweb.rollups import marks

    monkeypatch.setattr(marks, "_seconds_per_event", 20e-6)
    assert marks.refresh_delay_s(5.0) == 5.0  # nothing waits: the debounce alone
    for job in ("a", "b", "c", "idle"):
        JobRollup.objects.create(job=job, events=100_000, chunks=1)
    mark_dirty(["a", "b", "c"], now=100.0, stale_after_s=60.0)
    assert marks.refresh_delay_s(5.0) == pytest.approx(3 * 100_000 * 20e-6 / 0.25)
    JobRollup.objects.filter(job__in=["a", "b", "c"]).update(events=4_000_000, chunks=400)
    assert marks.refresh_delay_s(1.0) == pytest.approx(3 * 10_000 * 20e-6 / 0.25)
    assert marks.refresh_delay_s(30.0) == 30.0  # never shorter than the debounce
    monkeypatch.setattr(marks, "_seconds_per_event", 1e-3)
    assert marks.refresh_delay_s(5.0) == marks.MAX_REFRESH_DELAY_S < marks.MARK_STALE_AFTER_S


def test_the_cost_estimate_follows_measured_refreshes(monkeypatch: pytest.MonkeyPatch) -> None:
    from ettweb.rollups import marks
    from ettweb.rollups.refresh import RefreshStats

    monkeypatch.setattr(marks, "_seconds_per_event", 20e-6)
    for _ in range(30):
        marks.note_cost(RefreshStats(jobs=1, events=10_000, elapsed_s=1.0))  # 100 us/event
    assert marks._seconds_per_event == pytest.approx(100e-6, rel=0.01)
    marks.note_cost(RefreshStats(jobs=1, events=10, elapsed_s=5.0))  # too small to judge
    assert marks._seconds_per_event == pytest.approx(100e-6, rel=0.01)


@pytest.mark.django_db
def test_chunk_marks_are_one_row_per_job_and_batch_and_claimed_as_their_union() -> None:
    """A batch marks each job it touches once (its chunks as an array); a refresh claims
    every row of a job. Retention finds a job by any of its marked chunks, in any order."""
    size = chunk_store.chunk_s()

    def mark(*events: tuple[str, int]) -> None:
        chunk_store.mark_chunks([{"job": job, "kind": "mark", "ts": k * size}
                                 for job, k in events])

    mark(("a", 5), ("a", 2), ("b", 9))
    mark(("a", 7))
    assert sorted(DirtyChunk.objects.values_list("job", "chunks")) == [
        ("a", [2, 5]), ("a", [7]), ("b", [9])]
    DirtyChunk.objects.create(job="c", chunks=[8, 3])  # an array out of order
    assert chunk_store.jobs_marked_before(4 * size, size) == ["a", "c"]
    assert chunk_store.claim_chunks(["a", "b"]) == {"a": {2, 5, 7}, "b": {9}}
    assert list(DirtyChunk.objects.values_list("job", flat=True)) == ["c"]
