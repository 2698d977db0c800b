"""Refresh: bring a job's rollups up to date with its stored events, exactly.

Attribution is not additive: one late event can change a piece of timeline hours away (an
attempt window grows, a train span's high-water mark moves). So the refresh keeps each
job's attribution in chunks (``ettweb.attribution.chunk_*``, stored by ``rollups.chunk_store``)
that know what they depend on, recomputes the chunks new events land in and those whose
inputs they changed, and sums the chunks into the job's rows: the numbers always equal the
offline report's, and a refresh costs what the new events cost, not what the job has lived.
Storing the rows is ``rollups.writers``'s job.

Concurrency: every refresh takes ``pg_advisory_xact_lock(hashtext(job))`` for its jobs (in
hash order, so two workers never deadlock) and only then reads the job's events. The events
of a batch commit before its refresh starts, so whichever refresh runs last sees every
committed event and leaves the rollup exact.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Final

from django.conf import settings
from django.db import connection, transaction

from ettweb.attribution import (
    chunk_layout,
    chunk_refresh,
    chunk_summary,
    chunk_sums,
    chunk_sweep,
    completeness,
)
from ettweb.attribution.engine import Event, Segment
from ettweb.attribution.implied import BACKWARDS
from ettweb.attribution.lanes import Timeline
from ettweb.platform.retry import DATABASE_ERRORS
from ettweb.rollups import chunk_store, implied_store, parking
from ettweb.rollups.chunk_store import as_event, select_events
from ettweb.rollups.job_rows import JobRows, job_rows
from ettweb.rollups.marks import claim_marks, note_cost
from ettweb.rollups.writers import write_jobs

logger = logging.getLogger(__name__)
#: Jobs refreshed per transaction: bounds memory and lock time for very large batches.
JOBS_PER_TRANSACTION = 200

#: The events of a list of jobs (see :func:`load_events` for why this form).
_OF_JOBS: Final = "WHERE job = ANY(ARRAY(SELECT unnest(%s::text[])))"


@dataclass(frozen=True)
class RefreshStats:
    """What a refresh did: jobs and events attributed, day rows written and deleted."""

    jobs: int = 0
    events: int = 0
    day_rows_written: int = 0
    day_rows_deleted: int = 0
    days_written: tuple[date, ...] = ()
    elapsed_s: float = 0.0

    def merged(self, other: RefreshStats) -> RefreshStats:
        """Both refreshes' counts together (the elapsed time left at zero)."""
        return RefreshStats(
            jobs=self.jobs + other.jobs, events=self.events + other.events,
            day_rows_written=self.day_rows_written + other.day_rows_written,
            day_rows_deleted=self.day_rows_deleted + other.day_rows_deleted,
            days_written=tuple(sorted(set(self.days_written) | set(other.days_written))))

    def timed(self, began: float) -> RefreshStats:
        """These counts, with the time since ``began`` (a ``time.perf_counter()`` reading)."""
        return dataclasses.replace(self, elapsed_s=time.perf_counter() - began)


def refresh_jobs(job_ids: Iterable[str], *, only_marked: bool = False,
                 whole: bool = False) -> RefreshStats:
    """Bring the rollups of ``job_ids`` up to date with their stored events (exactly).

    Recomputes the chunks ingestion marked (and what they change, ``attribution.chunk_refresh``);
    ``whole`` recomputes every chunk from the events instead: for events that changed
    outside ingestion (deleted by hand, restored from a backup). A job with no stored
    events left loses its rollups. Safe to call concurrently for the same jobs from
    several workers; the last one to run leaves the exact numbers. ``only_marked`` skips
    jobs without a dirty mark (another refresh already took it): what the
    ``ett.refresh_rollups`` task wants. Every refresh clears the marks it covers.

    A job that cannot be refreshed never holds the others up, nor is tried forever: it is
    refreshed alone, and parked after failing the same way twice (``rollups.parking``);
    parked jobs are skipped. Database connection errors still propagate (the task waits).
    """
    began = time.perf_counter()
    ordered = sorted(set(job_ids))
    total = RefreshStats()
    for at in range(0, len(ordered), JOBS_PER_TRANSACTION):
        batch = ordered[at:at + JOBS_PER_TRANSACTION]
        total = total.merged(refresh_group(batch, only_marked=only_marked, whole=whole))
    stats = total.timed(began)
    note_cost(stats)
    return stats


def refresh_group(job_ids: list[str], *, only_marked: bool = False,
                  whole: bool = False) -> RefreshStats:
    """:func:`refresh_batch` for the jobs not parked; jobs that failed before, and every
    job of a group that raised, are refreshed alone (:func:`_refresh_alone`)."""
    begun = parking.begin(job_ids)
    alone = set(begun.failed_before)
    group = [job for job in job_ids if job not in begun.parked and job not in alone]
    total = RefreshStats()
    if group:
        try:
            total = refresh_batch(group, only_marked=only_marked, whole=whole)
        except DATABASE_ERRORS:
            raise
        except Exception:  # one job of them, or all: find out one by one
            logger.warning("rollup refresh of %d job(s) failed; refreshing them one by one",
                           len(group), exc_info=True)
            alone |= set(group)
    for job in sorted(alone):
        total = total.merged(_refresh_alone(job, only_marked=only_marked, whole=whole))
    return total


def _refresh_alone(job: str, *, only_marked: bool, whole: bool) -> RefreshStats:
    """Refresh one job in its own transaction; a failure is counted, and the same error
    twice in a row parks the job (``parking.failed``). Tries at most ``PARK_AFTER`` times."""
    for _ in range(parking.PARK_AFTER):
        try:
            return refresh_batch([job], only_marked=only_marked, whole=whole)
        except DATABASE_ERRORS:
            raise
        except Exception as exc:
            if parking.failed(job, exc):
                break
            parking.begin([job])
    return RefreshStats()


def load_events(job_ids: Sequence[str]) -> dict[str, list[Event]]:
    """The stored events of ``job_ids``, grouped by job (raw SQL: no model instances).

    The ids go through ``ARRAY(SELECT unnest(…))`` so the planner does not estimate each of
    them against every partition's statistics: with a literal list, planning costs more than
    running the query (same index scans, same rows either way).
    """
    grouped: dict[str, list[Event]] = {}
    with connection.cursor() as cursor:
        cursor.execute(select_events(_OF_JOBS),
                       [list(job_ids)])
        for row in cursor.fetchall():
            grouped.setdefault(row[1], []).append(as_event(row))
    return grouped


def lock_jobs(job_ids: Sequence[str]) -> None:
    """Serialize refreshes of the same job across workers until this transaction ends.

    Locks are taken in hash order: two workers holding overlapping sets never deadlock.
    One statement for all of them, not a round trip per job (an import refreshes thousands):
    a volatile function in the select list is evaluated after the ORDER BY sort.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtext(j) AS h "
                       "FROM unnest(%s::text[]) AS j) AS keys ORDER BY h", [list(job_ids)])


def _no_jit() -> None:
    """Keep Postgres from compiling this transaction's queries (JIT).

    Why: after a bulk load the daily partitions are not analyzed yet, so the planner costs
    a refresh's per-job reads over hundreds of partitions far above ``jit_above_cost``, and
    compiling such a read takes many times longer than running it. A refresh's queries
    are short index reads and small writes: compiling never pays for itself.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")


def refresh_batch(job_ids: list[str], *, only_marked: bool = False,
                  whole: bool = False) -> RefreshStats:
    """Refresh one transaction's worth of jobs (:func:`refresh_jobs` cuts them): lock them,
    claim their marks, recompute their dirty chunks and store the summed rows. ``whole``
    drops every chunk that is not final and recomputes the jobs from their events."""
    with transaction.atomic():
        _no_jit()
        lock_jobs(job_ids)
        parking.clear(job_ids)  # gone when this commits: a failure keeps them
        marked = claim_marks(job_ids)
        if only_marked:
            job_ids = [job for job in job_ids if job in marked]
        if not job_ids:
            return RefreshStats()
        size = chunk_store.chunk_s()
        if whole:  # final chunks stay: their events are gone (retention)
            chunk_store.delete_chunks(job_ids, keep_final=True)
        dirty = chunk_store.claim_chunks(job_ids)
        stored, resized = chunk_store.stored_states(job_ids, size)
        fresh = [job for job in job_ids if whole or job not in stored]
        if resized:
            chunk_store.delete_chunks(sorted(resized))
        loaded = _load_fresh(fresh, size)
        if loaded is None:  # too many events to hold: find their chunks, read them one by one
            for job, found in chunk_store.home_chunks(fresh, size).items():
                dirty[job] = dirty.get(job, set()) | found
            loaded = {}
        for job, by_fine in loaded.items():
            dirty[job] = dirty.get(job, set()) | set(by_fine)
        implied = implied_store.refresh_implied(job_ids, dirty, size, loaded, whole)
        for job, fines in implied.dirty.items():  # §3 rule 3: spans a heartbeat implies
            dirty[job] = dirty.get(job, set()) | fines
        plans = _plan(job_ids, dirty, stored, size, loaded)
        prefetched = chunk_store.prefetch_home(
            ((job, k, following) for job, placed in plans.items() if job not in loaded
             for k, following in _dirty_ranges(placed)), size, chunk_refresh.CACHED_EVENTS)
        writer = chunk_store.ChunkWriter(size, fresh)
        kept = _KeptSegments()
        done = {job: _refresh_job(job, plans[job], stored.get(job, {}), size, writer,
                                  prefetched, loaded.get(job), kept, implied)
                for job in job_ids}
        writer.flush()
        timelines = chunk_store.read_timelines([job for job, d in done.items() if d.skeleton])
        rows = [_summed(job, d, timelines.get(job, {}), size, kept, implied)
                for job, d in done.items() if d.skeleton is not None]
        gone = [job for job, d in done.items() if d.skeleton is None]
        implied_store.forget(gone)
        events = sum(d.events_read for d in done.values())
        written, deleted, days = write_jobs(rows, gone)
    return RefreshStats(jobs=len(rows), events=events, day_rows_written=written,
                        day_rows_deleted=deleted, days_written=tuple(sorted(days)))


def _load_fresh(job_ids: Sequence[str], size: float,
                ) -> dict[str, dict[int, list[Event]]] | None:
    """Every event of jobs with no chunks yet (new jobs, a whole recompute) grouped by
    fine chunk, in one query; ``None`` when they are more than ``CACHED_EVENTS`` (then
    read chunk by chunk, in bounded memory). Why: finding, counting and reading a small
    new job's chunks one query each would probe every daily partition three times per job,
    which dominates an import of many small jobs."""
    if not job_ids:
        return {}
    events = chunk_store.read_jobs(job_ids, chunk_refresh.CACHED_EVENTS)
    if events is None:
        return None
    loaded: dict[str, dict[int, list[Event]]] = {job: {} for job in job_ids}
    for event in events:
        fine = chunk_summary.chunk_of(chunk_summary.home_time(event), size)
        loaded[event["job"]].setdefault(fine, []).append(event)
    return loaded


def _plan(job_ids: Sequence[str], dirty: Mapping[str, set[int]],
          stored: Mapping[str, dict[int, chunk_sweep.ChunkState]], size: float,
          loaded: Mapping[str, dict[int, list[Event]]]) -> dict[str, chunk_refresh.Plan]:
    """Lay out every job's chunks around its dirty fine chunks (``chunk_layout.placing``),
    asking Postgres for the events per fine chunk all jobs still need in one query per
    round (usually one round; none for the jobs whose events are ``loaded``)."""
    group = chunk_refresh.GROUP_EVENTS
    steps = {job: chunk_layout.placing(dirty.get(job, set()), stored.get(job, {}), size, group)
             for job in job_ids}
    plans: dict[str, chunk_refresh.Plan] = {}
    asked: dict[str, chunk_layout.Ranges] = {}
    for job, step in steps.items():
        _advance(job, step, None, plans, asked)
    while asked:
        counts = chunk_store.count_home({job: r for job, r in asked.items() if job not in loaded},
                                        size)
        for job in asked.keys() & loaded.keys():
            counts[job] = {fine: len(events) for fine, events in loaded[job].items()}
        answering, asked = asked, {}
        for job in answering:
            _advance(job, steps[job], counts.get(job, {}), plans, asked)
    return plans


def _advance(job: str, step: Generator[chunk_layout.Ranges, chunk_layout.Counts,
                                       chunk_refresh.Plan],
             counts: chunk_layout.Counts | None, plans: dict[str, chunk_refresh.Plan],
             asked: dict[str, chunk_layout.Ranges]) -> None:
    """Give one job's layout the counts it asked for (``None``: start it); keep its plan
    when done, or what it asks next."""
    try:
        asked[job] = next(step) if counts is None else step.send(counts)
    except StopIteration as done:
        plans[job] = done.value


def _dirty_ranges(placed: chunk_refresh.Plan) -> list[tuple[int, int | None]]:
    """The (first fine chunk, next chunk's) of the chunks a plan reads again."""
    following = chunk_refresh.followers(placed.chunks)
    return [(k, following[k]) for k in sorted(placed.dirty)]


def _refresh_job(job: str, placed: chunk_refresh.Plan, stored: dict[int, chunk_sweep.ChunkState],
                 size: float, writer: chunk_store.ChunkWriter,
                 prefetched: dict[tuple[str, int, int | None], list[Event]] | None = None,
                 loaded: dict[int, list[Event]] | None = None,
                 kept: _KeptSegments | None = None,
                 implied: implied_store.Implied | None = None) -> chunk_refresh.Refreshed:
    """Recompute one job's changed chunks and queue them for ``writer``. ``prefetched``:
    the dirty chunks' home events, read for the whole transaction at once (``None``: too
    many, read each); ``loaded``: all the job's events by fine chunk (a new job's)."""
    planned = set(_dirty_ranges(placed))

    def read_home(k: int, following: int | None) -> list[Event]:
        if implied is None:
            return read_stored(k, following)
        end = float("inf") if following is None else following * size
        return read_stored(k, following) + implied.home(job, k * size, end)

    def read_stored(k: int, following: int | None) -> list[Event]:
        if loaded is not None:
            return chunk_summary.home_of(loaded, k, following)
        if prefetched is not None and (k, following) in planned:
            return prefetched.get((job, k, following), [])
        return chunk_store.read_home(job, k, following, size)

    def write(state: chunk_sweep.ChunkState) -> None:
        if kept is not None:
            kept.add(job, state)
        writer.add(job, state)

    done = chunk_refresh.refresh_planned(placed, stored, read_home,
                                  lambda k: chunk_store.read_carry(job, k), size, write=write,
                                  max_days=settings.ETT_REFRESH_MAX_JOB_DAYS)
    writer.delete(job, done.deleted)
    return done


class _KeptSegments:
    """The segments of the chunks a refresh recomputed, kept for its recoveries while they
    are few (``LIMIT`` in all), so a refresh of many new jobs does not read them back from
    the chunks one query a job."""

    LIMIT: Final = 50_000

    def __init__(self) -> None:
        self.segments: dict[tuple[str, int], list[Segment]] = {}
        self.count = 0

    def add(self, job: str, state: chunk_sweep.ChunkState) -> None:
        segments = state.segments or []
        if self.count + len(segments) <= self.LIMIT:
            self.segments[(job, state.chunk)] = segments
            self.count += len(segments)

    def read(self, job: str, ks: Sequence[int]) -> dict[int, list[Segment]]:
        found = {k: self.segments[(job, k)] for k in ks if (job, k) in self.segments}
        missing = [k for k in ks if k not in found]
        return {**found, **chunk_store.read_segments(job, missing)} if missing else found


def _summed(job: str, done: chunk_refresh.Refreshed, timelines: dict[int, list[Timeline]],
            size: float, kept: _KeptSegments, implied: implied_store.Implied) -> JobRows:
    """One refreshed job's rows, summed from its chunks (written by now). The implied
    spans (§3 rule 3) count in every number but not among the job's events."""
    assert done.skeleton is not None
    backwards = implied.backwards.get(job, 0)
    assembled = chunk_sums.assemble(job, done.skeleton, done.states,
                                    lambda ks: kept.read(job, ks), size,
                                    extra_anomalies={BACKWARDS: backwards} if backwards else None)
    timeline = chunk_sums.job_timeline(done.skeleton, timelines)
    findings = completeness.check(assembled.attribution.attempts, timeline,
                                  done.skeleton.facts)
    return job_rows(assembled.attribution, assembled.days, timeline,
                    events=done.skeleton.events - len(implied.spans.get(job, ())),
                    chunk_count=len(done.states),
                    findings=findings)
