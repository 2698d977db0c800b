"""Keep the rollup tables equal to what the engine says about the stored events.

Attribution is not additive: one late event can change a piece of timeline hours away (an
attempt window grows, a train span's high-water mark moves). So the refresh keeps each
job's attribution in chunks (``ettweb.attribution.chunk_refresh`` and its sibling
``chunk_*`` modules, stored by ``rollups.chunked``) that know what they depend on,
recomputes the chunks new events land in and those whose inputs they changed, and sums
the chunks into the job's rows: the numbers always equal the offline report's, and a
refresh costs what the new events cost, not what the job has lived.

What IS incremental is the writing: per-day rows are compared with what is stored and only
the rows that changed are written, so a late backlog days old rewrites exactly the days it
touches (``DailyCategoryRollup.written_at`` shows it). New rows are written with COPY, job
rows upserted from a COPY-filled staging table: the ORM's bulk operations spent more than
half of an import's refresh (20,000 new jobs) building and quoting parameters.

Concurrency: every refresh takes ``pg_advisory_xact_lock(hashtext(job))`` for its jobs (in
hash order, so two workers never deadlock) and only then reads the job's events. The events
of a batch commit before its refresh starts, so whichever refresh runs last sees every
committed event and leaves the rollup exact.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from django.db import connection, transaction
from django.utils import timezone

from ettweb.attribution import chunk_refresh, chunk_summary, chunk_sums, chunk_sweep
from ettweb.attribution.components import PRODUCTIVE
from ettweb.attribution.engine import Event, JobAttribution, Segment
from ettweb.attribution.lanes import Timeline
from ettweb.ingest import models as ingest
from ettweb.ingest.models import Job
from ettweb.rollups import chunked
from ettweb.rollups.buckets import bucket_sql, gpu_bucket
from ettweb.rollups.chunked import as_event, select_events
from ettweb.rollups.models import (
    AttemptRollup,
    AttemptTimeline,
    AttributionChunk,
    DailyCategoryRollup,
    DirtyChunk,
    DirtyJob,
    FleetDayRollup,
    JobDayRollup,
    JobLostRollup,
    JobRollup,
    LabelDayRollup,
    RecoveryPartRollup,
    RecoveryRollup,
)

#: Jobs refreshed per transaction: bounds memory and lock time for very large batches.
JOBS_PER_TRANSACTION = 200
#: Two day values closer than this (relative) are "unchanged": a recompute may redistribute
#: float rounding across a long segment without any event touching that day.
SAME_REL_TOL = 1e-9
#: A dirty mark older than this has lost its refresh task (a worker died between commit and
#: publish): the next batch of the job schedules one again, and beat sweeps the rest.
MARK_STALE_AFTER_S = 60.0
#: Longest a refresh waits after its job's first new batch: below ``MARK_STALE_AFTER_S``, so
#: a waiting refresh is never taken for a lost one.
MAX_REFRESH_DELAY_S = 45.0
#: The share of one worker's time the refreshes of the waiting jobs may take (see
#: :func:`refresh_delay_s`).
REFRESH_SHARE = 0.25
#: Seconds a refresh costs per stored event before this process has timed one (20 us: a
#: busy two-core machine; the first refreshes measure the real figure).
_FIRST_SECONDS_PER_EVENT = 20e-6
_seconds_per_event = _FIRST_SECONDS_PER_EVENT

DayKey = tuple[date, str]  # (UTC day, category)
DayValues = tuple[float, float]  # (seconds, GPU-seconds)


@dataclass(frozen=True)
class RefreshStats:
    """What a refresh did: jobs and events attributed, day rows written and deleted."""

    jobs: int = 0
    events: int = 0
    day_rows_written: int = 0
    day_rows_deleted: int = 0
    days_written: tuple[date, ...] = ()
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class _JobRows:
    """Everything stored for one job, computed from its attribution.

    ``timeline`` is what the job page draws; ``job.timeline_digest`` sums it up, so a
    refresh that leaves it as it was does not rewrite it. (The per-rank lanes stay with
    their chunks: ``AttributionChunk.lanes``.)
    """

    job: JobRollup
    attempts: list[AttemptRollup]
    recoveries: list[RecoveryRollup]
    days: dict[DayKey, DayValues]
    timeline: list[tuple[Any, ...]]  # TIMELINE_COLUMNS


# --------------------------------------------------------------------------- reading events

#: The events of a list of jobs (see :func:`load_events` for why this form).
_OF_JOBS: Final = "WHERE job = ANY(ARRAY(SELECT unnest(%s::text[])))"


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


# --------------------------------------------------------------------------- computing rows

def _recovery_rows(attribution: JobAttribution) -> list[RecoveryRollup]:
    """One row per ``Recovery`` of the engine (§3.7), with its GPU-weighted split."""
    gpus = {window.attempt: window.gpus for window in attribution.attempts}
    return [
        RecoveryRollup(
            job_id=attribution.job, attempt=recovery.attempt, start=recovery.start,
            end=recovery.end, day=chunk_sums.utc_day(recovery.start),
            seconds=recovery.end - recovery.start, gpus=gpus.get(recovery.attempt, 1),
            by_category={k: v for k, v in recovery.by_category.items() if v},
            by_category_gpu={k: v for k, v in recovery.by_category_gpu_s.items() if v},
        )
        for recovery in attribution.recoveries
    ]


def _job_meta(attribution: JobAttribution) -> dict[str, str]:
    """model/team/cluster from attempt_start attrs; a later attempt's value wins."""
    meta: dict[str, str] = {}
    for window in attribution.attempts:
        for key in ("model", "team", "cluster"):
            if window.attrs.get(key) is not None:
                meta[key] = str(window.attrs[key])[:200]
    return meta


#: Column order of the timeline's rows (``_copy_columns`` of the model; a test holds them
#: equal). Plain tuples, not model instances.
TIMELINE_COLUMNS = ("job", "attempt", "bin_s", "pieces")


def _timeline_rows(job: str, timeline: Sequence[Timeline]) -> tuple[list[tuple[Any, ...]], str]:
    """The job page's category timeline as rows in ``TIMELINE_COLUMNS`` order, and their
    digest (``repr`` of plain tuples of str, int and float is exact and stable)."""
    rows = [(job, row.attempt, row.bin_s, list(row.pieces)) for row in timeline]
    return rows, hashlib.blake2b(repr(rows).encode(), digest_size=16).hexdigest()


def job_rows(attribution: JobAttribution, days: dict[DayKey, DayValues],
             timeline: Sequence[Timeline], *, events: int, chunk_count: int) -> _JobRows:
    """Every rollup row of one job, unsaved; the single place numbers are copied from.

    ``attribution`` and ``days`` are the job's chunks summed up (``chunk_sums.assemble``),
    ``timeline`` the job page's category timeline, ``events`` the stored events attributed.
    """
    windows = attribution.attempts
    last = windows[-1]
    rows, digest = _timeline_rows(attribution.job, timeline)
    job = JobRollup(
        job=attribution.job, wall_s=attribution.wall_s, productive_s=attribution.productive_s,
        wall_gpu_s=attribution.wall_gpu_s, productive_gpu_s=attribution.productive_gpu_s,
        ett_pct=attribution.ett_pct, lost_s=dict(attribution.lost_s),
        lost_gpu_s=dict(attribution.lost_gpu_s), attempts=len(windows), status=last.status,
        gpus=last.gpus, window_start=windows[0].start, window_end=last.end,
        repeated_steps=attribution.repeated_steps, time_to_start_s=attribution.time_to_start_s,
        failures=attribution.failures, duplicates=attribution.duplicates,
        anomalies=dict(attribution.anomalies), events=events, chunks=chunk_count,
        updated_at=timezone.now(), timeline_digest=digest, **_job_meta(attribution),
    )
    repeated = attribution.repeated_steps_by_attempt
    attempts = [AttemptRollup(job_id=attribution.job, attempt=w.attempt, start=w.start,
                              end=w.end, status=w.status, gpus=w.gpus,
                              repeated_steps=repeated.get(w.attempt, 0)) for w in windows]
    return _JobRows(job, attempts, _recovery_rows(attribution), days, rows)


# --------------------------------------------------------------------------- refresh

def _lock_jobs(job_ids: Sequence[str]) -> None:
    """Serialize refreshes of the same job across workers until this transaction ends.

    Locks are taken in hash order: two workers holding overlapping sets never deadlock.
    One statement for all of them, not a round trip per job (an import refreshes thousands):
    a volatile function in the select list is evaluated after the ORDER BY sort.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtext(j) AS h "
                       "FROM unnest(%s::text[]) AS j) AS keys ORDER BY h", [list(job_ids)])


def _same(a: DayValues, b: DayValues) -> bool:
    return all(abs(x - y) <= SAME_REL_TOL * max(1.0, abs(x), abs(y))
               for x, y in zip(a, b, strict=True))


#: Temporary table the job rows of a refresh are COPied into before the upsert; dropped at
#: commit, so it always has the columns of the JobRollup table of the moment.
_JOB_STAGING = "rollup_job_staging"


def _upsert_jobs(jobs: Sequence[JobRollup]) -> None:
    """Insert or overwrite the job rows (one statement; rows taken in job order, as before).

    COPY fills a temporary table and ``INSERT … ON CONFLICT (job) DO UPDATE`` moves the rows:
    COPY cannot upsert, and each job row must keep its id (the child tables join on job).
    """
    if not jobs:
        return
    table = JobRollup._meta.db_table
    columns = _copy_columns(JobRollup)
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    updates = ", ".join(f"{connection.ops.quote_name(c)} = EXCLUDED.{connection.ops.quote_name(c)}"
                        for c in columns if c != "job")
    raw = connection.connection
    assert raw is not None  # the caller holds a transaction, hence a connection
    with raw.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_JOB_STAGING} ON COMMIT DROP AS "
                       f"SELECT {quoted} FROM {table} WITH NO DATA")
        cursor.execute(f"DELETE FROM {_JOB_STAGING}")
        _copy(cursor, JobRollup, [_values(job) for job in jobs], table=_JOB_STAGING)
        cursor.execute(f"INSERT INTO {table} ({quoted}) SELECT {quoted} FROM {_JOB_STAGING} "
                       f"ORDER BY job ON CONFLICT (job) DO UPDATE SET {updates}")


def _replace_children(model: type, jobs: list[str], rows: list[Any]) -> None:
    """Delete the jobs' rows of ``model`` and COPY the new ones in (model instances, or
    tuples already in ``_copy_columns`` order)."""
    model.objects.filter(job_id__in=jobs).delete()  # type: ignore[attr-defined]
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as cursor:
        _copy(cursor, model, [_json_cells(row) if isinstance(row, tuple) else _values(row)
                              for row in rows])


def _lost_rows(job: JobRollup) -> list[tuple[str, str, float]]:
    """The job's ``lost_gpu_s`` as :class:`JobLostRollup` rows (``_copy_columns`` order)."""
    return [(job.job, category, float(gpu_s)) for category, gpu_s in
            sorted(job.lost_gpu_s.items()) if gpu_s]


def _part_rows(rows: _JobRows) -> list[tuple[str, int, date, str, float]]:
    """The job's recoveries' parts as :class:`RecoveryPartRollup` rows (``_copy_columns``
    order: job, attempt, day, category, GPU-seconds)."""
    return [(r.job_id, r.attempt, r.day, category, float(gpu_s))
            for r in rows.recoveries for category, gpu_s in sorted(r.by_category_gpu.items())
            if gpu_s]


def _write_jobs(rows: Sequence[_JobRows], gone: Sequence[str]) -> tuple[int, int, set[date]]:
    """Upsert job rows, replace attempts and recoveries, rewrite the timeline of the jobs
    whose drawing changed, and diff the day rows (a gone job's with none wanted,
    so the day sums lose them before its rollup and the rest of its rows are deleted)."""
    stored = dict(JobRollup.objects.filter(job__in=[r.job.job for r in rows])
                  .values_list("job", "timeline_digest"))
    labels_before = _labels([r.job.job for r in rows])
    _upsert_jobs([r.job for r in rows])
    jobs = [r.job.job for r in rows]
    _replace_children(AttemptRollup, jobs, [a for r in rows for a in r.attempts])
    _replace_children(RecoveryRollup, jobs, [x for r in rows for x in r.recoveries])
    _replace_children(RecoveryPartRollup, jobs, [x for r in rows for x in _part_rows(r)])
    _replace_children(JobLostRollup, jobs, [x for r in rows for x in _lost_rows(r.job)])
    redrawn = [r for r in rows if stored.get(r.job.job) != r.job.timeline_digest]
    if redrawn:
        _replace_children(AttemptTimeline, [r.job.job for r in redrawn],
                          [t for r in redrawn for t in r.timeline])
    written = _write_days({**{job: {} for job in gone}, **{r.job.job: r.days for r in rows}},
                          labels_before)
    JobRollup.objects.filter(job__in=gone).delete()
    chunked.delete_chunks(gone)
    return written


#: A job's (model, team, cluster, GPU-size bucket): the key of its label sums.
Labels = tuple[str, str, str, str]


def _labels(job_ids: Sequence[str]) -> dict[str, Labels]:
    """The jobs' label keys as their rollups hold them now (jobs without one left out)."""
    return {job: (model, team, cluster, gpu_bucket(gpus)) for job, model, team, cluster, gpus
            in JobRollup.objects.filter(job__in=list(job_ids))
            .values_list("job", "model", "team", "cluster", "gpus")}


def _write_days(wanted: dict[str, dict[DayKey, DayValues]],
                labels_before: Mapping[str, Labels] | None = None,
                ) -> tuple[int, int, set[date]]:
    """Write only the day rows whose numbers changed; returns (written, deleted, days).

    The fleet's day sums (:class:`FleetDayRollup`) and the label sums
    (:class:`LabelDayRollup`) get each written row's new value and lose its old one, and
    the touched job-days (:class:`JobDayRollup`) are summed again, in this same
    transaction: no reader ever sees the tables disagree. ``labels_before`` holds the jobs'
    label keys before this refresh rewrote their rollups (default: unchanged); a job whose
    key changed moves every one of its rows from the old key's sums to the new one's.
    """
    if not wanted:
        return 0, 0, set()
    labels = _labels(list(wanted))
    before = labels if labels_before is None else labels_before
    stored: dict[tuple[str, date, str], tuple[int, DayValues]] = {
        (str(job), day, category): (pk, (seconds, gpu_seconds))
        for pk, job, day, category, seconds, gpu_seconds in DailyCategoryRollup.objects
        .filter(job_id__in=list(wanted))
        .values_list("id", "job_id", "day", "category", "seconds", "gpu_seconds")
    }
    moved = {job for job in wanted if job in before and before[job] != labels.get(job)}
    label_changes = _moved_label_changes(stored, wanted, moved, before, labels)
    now = timezone.now()
    inserts: list[tuple[date, str, str, float, float, Any]] = []  # _copy_columns order
    updates: list[tuple[float, float, Any, int]] = []
    changes: list[tuple[str, date, str, float, float, int]] = []
    touched: set[tuple[str, date]] = set()
    for job, values in wanted.items():
        for (day, category), new in values.items():
            old = stored.pop((job, day, category), None)
            if old is None:
                inserts.append((day, job, category, new[0], new[1], now))
            elif not _same(old[1], new):
                updates.append((new[0], new[1], now, old[0]))
                changes.append((job, day, category, old[1][0], old[1][1], -1))
            else:
                continue
            changes.append((job, day, category, new[0], new[1], 1))
            touched.add((job, day))
    for (job, day, category), (_, (seconds, gpu_seconds)) in stored.items():
        changes.append((job, day, category, seconds, gpu_seconds, -1))
        touched.add((job, day))
    label_changes += [(day, category, *labels[job], s, g, sign)
                      for job, day, category, s, g, sign in changes
                      if job not in moved and job in labels]
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as copy_cursor:
        _copy(copy_cursor, DailyCategoryRollup, inserts)
    with connection.cursor() as cursor:
        if updates:
            cursor.executemany(
                f"UPDATE {DailyCategoryRollup._meta.db_table} SET seconds = %s, "
                "gpu_seconds = %s, written_at = %s WHERE id = %s", updates)
        if stored:
            cursor.execute(f"DELETE FROM {DailyCategoryRollup._meta.db_table} "
                           "WHERE id = ANY(%s)", [[pk for pk, _ in stored.values()]])
        _change_sums(cursor, FleetDayRollup._meta.db_table, _FLEET_KEY,
                     [change[1:] for change in changes])
        _change_sums(cursor, LabelDayRollup._meta.db_table, _LABEL_KEY, label_changes)
        _rewrite_job_days(cursor, wanted, touched)
    return len(inserts) + len(updates), len(stored), {day for _, day in touched}


#: One change to the label sums: (day, category, model, team, cluster, GPU bucket,
#: seconds, GPU-seconds, +1 or -1).
_LabelChange = tuple[date, str, str, str, str, str, float, float, int]


def _moved_label_changes(stored: Mapping[tuple[str, date, str], tuple[int, DayValues]],
                         wanted: Mapping[str, Mapping[DayKey, DayValues]], moved: set[str],
                         before: Mapping[str, Labels],
                         labels: Mapping[str, Labels]) -> list[_LabelChange]:
    """For jobs whose label key changed: every stored row out of the old key's sums, every
    wanted row into the new key's."""
    changes: list[_LabelChange] = []
    for (job, day, category), (_, (seconds, gpu_seconds)) in stored.items():
        if job in moved:
            changes.append((day, category, *before[job], seconds, gpu_seconds, -1))
    for job in moved:
        if job in labels:
            changes += [(day, category, *labels[job], seconds, gpu_seconds, 1)
                        for (day, category), (seconds, gpu_seconds) in wanted[job].items()]
    return changes


#: The key columns of each sum table and their SQL types, in lock (key) order.
_FLEET_KEY: Final = (("day", "date"), ("category", "text"))
_LABEL_KEY: Final = (*_FLEET_KEY, ("model", "text"), ("team", "text"), ("cluster", "text"),
                     ("gpus", "text"))


def _change_sums(cursor: Any, table: str, key: Sequence[tuple[str, str]],
                 changes: Sequence[tuple[Any, ...]]) -> None:
    """Add ``changes`` (key values in ``key`` order, then seconds, GPU-seconds, +1 or -1)
    to a sum table in one statement, cells in key order.

    Exact: each value enters as ``float8::numeric``, the same conversion the backfill and
    :func:`day_sum_drift` apply to the stored rows. Key order: concurrent refreshes that
    share cells (today's, above all) lock them in the same order, so never deadlock; the
    locks last from here to the commit that follows. A cell that reaches exactly zero (its
    last row gone) is deleted.
    """
    if not changes:
        return
    columns = [list(column) for column in zip(*changes, strict=True)]
    names = ", ".join(name for name, _ in key)
    arrays = ", ".join(f"%s::{kind}[]" for _, kind in key)
    cursor.execute(
        f"INSERT INTO {table} AS f ({names}, seconds, gpu_seconds) "
        f"SELECT {names}, SUM(sign * s::numeric), SUM(sign * g::numeric) "
        f"FROM unnest({arrays}, %s::float8[], %s::float8[], %s::int[]) "
        f"AS c({names}, s, g, sign) GROUP BY {names} ORDER BY {names} "
        f"ON CONFLICT ({names}) DO UPDATE SET seconds = f.seconds + EXCLUDED.seconds, "
        f"gpu_seconds = f.gpu_seconds + EXCLUDED.gpu_seconds", columns)
    cursor.execute(
        f"DELETE FROM {table} f USING unnest({arrays}) AS c({names}) "
        f"WHERE ({', '.join(f'f.{name}' for name, _ in key)}) = "
        f"({', '.join(f'c.{name}' for name, _ in key)}) "
        f"AND f.seconds = 0 AND f.gpu_seconds = 0", columns[:len(key)])


def _rewrite_job_days(cursor: Any, wanted: Mapping[str, Mapping[DayKey, DayValues]],
                      touched: set[tuple[str, date]]) -> None:
    """Replace the job-day sums of the ``touched`` (job, day) pairs from the wanted rows
    (``math.fsum``: the same sum whatever order the categories come in)."""
    if not touched:
        return
    pairs = sorted(touched)
    cursor.execute(
        f"DELETE FROM {JobDayRollup._meta.db_table} d USING unnest(%s::text[], %s::date[]) "
        "AS t(job, day) WHERE d.job = t.job AND d.day = t.day",
        [[job for job, _ in pairs], [day for _, day in pairs]])
    walls: dict[tuple[str, date], list[float]] = defaultdict(list)
    productive: dict[tuple[str, date], float] = defaultdict(float)
    for job in {job for job, _ in pairs}:
        for (day, category), (_, gpu_seconds) in wanted.get(job, {}).items():
            if (job, day) in touched:
                walls[(job, day)].append(gpu_seconds)
                if category == PRODUCTIVE:
                    productive[(job, day)] += gpu_seconds
    rows = [(job, day, math.fsum(walls[(job, day)]), productive[(job, day)])
            for job, day in pairs if (job, day) in walls]
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as copy_cursor:
        _copy(copy_cursor, JobDayRollup, rows)


def _claim_marks(job_ids: Sequence[str]) -> set[str]:
    """Delete the dirty marks of ``job_ids``; returns the jobs that were marked.

    Runs after the advisory locks and before the events are read. A batch still storing
    events of one of these jobs holds its mark's row lock (``mark_dirty``): the DELETE waits
    for that batch to commit, so the read that follows sees its events. A batch that commits
    after the DELETE finds no mark, sets a new one and schedules another refresh.
    """
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DirtyJob._meta.db_table} WHERE job = ANY(%s) RETURNING job",
                       [list(job_ids)])
        return {row[0] for row in cursor.fetchall()}


def _refresh_chunk(job_ids: list[str], *, only_marked: bool = False,
                   whole: bool = False) -> RefreshStats:
    with transaction.atomic():
        _lock_jobs(job_ids)
        marked = _claim_marks(job_ids)
        if only_marked:
            job_ids = [job for job in job_ids if job in marked]
        if not job_ids:
            return RefreshStats()
        size = chunked.chunk_s()
        if whole:  # final chunks stay: their events are gone (retention)
            chunked.delete_chunks(job_ids, keep_final=True)
        dirty = chunked.claim_chunks(job_ids)
        stored, resized = chunked.stored_states(job_ids, size)
        fresh = [job for job in job_ids if whole or job not in stored]
        if resized:
            chunked.delete_chunks(sorted(resized))
        loaded = _load_fresh(fresh, size)
        if loaded is None:  # too many events to hold: find their chunks, read them one by one
            for job, found in chunked.home_chunks(fresh, size).items():
                dirty[job] = dirty.get(job, set()) | found
            loaded = {}
        for job, by_fine in loaded.items():
            dirty[job] = dirty.get(job, set()) | set(by_fine)
        plans = _plan(job_ids, dirty, stored, size, loaded)
        prefetched = chunked.prefetch_home(
            ((job, k, following) for job, placed in plans.items() if job not in loaded
             for k, following in _dirty_ranges(placed)), size, chunk_refresh.CACHED_EVENTS)
        writer = chunked.ChunkWriter(size)
        kept = _KeptSegments()
        done = {job: _refresh_job(job, plans[job], stored.get(job, {}), size, writer,
                                  prefetched, loaded.get(job), kept) for job in job_ids}
        writer.flush()
        timelines = chunked.read_timelines([job for job, d in done.items() if d.skeleton])
        rows = [_summed(job, d, timelines.get(job, {}), size, kept)
                for job, d in done.items() if d.skeleton is not None]
        gone = [job for job, d in done.items() if d.skeleton is None]
        events = sum(d.events_read for d in done.values())
        written, deleted, days = _write_jobs(rows, gone)
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
    loaded: dict[str, dict[int, list[Event]]] = {job: {} for job in job_ids}
    with connection.cursor() as cursor:
        cursor.execute(select_events(f"{_OF_JOBS} LIMIT %s"),
                       [list(job_ids), chunk_refresh.CACHED_EVENTS + 1])
        rows = cursor.fetchall()
    if len(rows) > chunk_refresh.CACHED_EVENTS:
        return None
    for row in rows:
        event = as_event(row)
        fine = chunk_summary.chunk_of(chunk_summary.home_time(event), size)
        loaded[event["job"]].setdefault(fine, []).append(event)
    return loaded


def _plan(job_ids: Sequence[str], dirty: Mapping[str, set[int]],
          stored: Mapping[str, dict[int, chunk_sweep.ChunkState]], size: float,
          loaded: Mapping[str, dict[int, list[Event]]]) -> dict[str, chunk_refresh.Plan]:
    """Place every job's dirty fine chunks in chunks, with one count query for all (none
    for the jobs whose events are ``loaded``)."""
    unplaced = {job: chunk_refresh.unplaced(dirty.get(job, set()), stored.get(job, {}), size)
                for job in job_ids if job not in loaded}
    counts = chunked.count_home({job: f for job, f in unplaced.items() if f}, size)
    for job, by_fine in loaded.items():
        counts[job] = {fine: len(events) for fine, events in by_fine.items()}
    return {job: chunk_refresh.plan(dirty.get(job, set()), stored.get(job, {}), counts.get(job, {}),
                             size) for job in job_ids}


def _dirty_ranges(placed: chunk_refresh.Plan) -> list[tuple[int, int | None]]:
    """The (first fine chunk, next chunk's) of the chunks a plan reads again."""
    following = chunk_refresh.followers(placed.chunks)
    return [(k, following[k]) for k in sorted(placed.dirty)]


def _refresh_job(job: str, placed: chunk_refresh.Plan, stored: dict[int, chunk_sweep.ChunkState],
                 size: float, writer: chunked.ChunkWriter,
                 prefetched: dict[tuple[str, int, int | None], list[Event]] | None = None,
                 loaded: dict[int, list[Event]] | None = None,
                 kept: _KeptSegments | None = None) -> chunk_refresh.Refreshed:
    """Recompute one job's changed chunks and queue them for ``writer``. ``prefetched``:
    the dirty chunks' home events, read for the whole transaction at once (``None``: too
    many, read each); ``loaded``: all the job's events by fine chunk (a new job's)."""
    planned = set(_dirty_ranges(placed))

    def read_home(k: int, following: int | None) -> list[Event]:
        if loaded is not None:
            return chunk_summary.home_of(loaded, k, following)
        if prefetched is not None and (k, following) in planned:
            return prefetched.get((job, k, following), [])
        return chunked.read_home(job, k, following, size)

    def write(state: chunk_sweep.ChunkState) -> None:
        if kept is not None:
            kept.add(job, state)
        writer.add(job, state)

    done = chunk_refresh.refresh_planned(placed, stored, read_home,
                                  lambda k: chunked.read_carry(job, k), size, write=write)
    writer.delete(job, done.deleted)
    return done


class _KeptSegments:
    """The segments of the chunks a refresh recomputed, kept for its recoveries while they
    are few (``LIMIT`` in all): a refresh of 200 new jobs read them back one query a job."""

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
        return {**found, **chunked.read_segments(job, missing)} if missing else found


def _summed(job: str, done: chunk_refresh.Refreshed, timelines: dict[int, list[Timeline]],
            size: float, kept: _KeptSegments) -> _JobRows:
    """One refreshed job's rows, summed from its chunks (written by now)."""
    assert done.skeleton is not None
    assembled = chunk_sums.assemble(job, done.skeleton, done.states,
                                lambda ks: kept.read(job, ks), size)
    timeline = chunk_sums.job_timeline(done.skeleton, timelines)
    return job_rows(assembled.attribution, assembled.days, timeline,
                    events=done.skeleton.events, chunk_count=len(done.states))


def _note_cost(stats: RefreshStats) -> None:
    """Fold one refresh's seconds per event into this process's running estimate."""
    global _seconds_per_event
    if stats.events >= 1000 and stats.elapsed_s > 0:
        _seconds_per_event = 0.8 * _seconds_per_event + 0.2 * stats.elapsed_s / stats.events


def refresh_delay_s(base_s: float) -> float:
    """How long a newly marked job's refresh should wait: ``base_s`` (the debounce), or
    longer when the jobs now waiting would otherwise keep the workers refreshing.

    Why: a running job is marked again by its next batch as soon as its refresh took the
    mark. With many jobs marked at once (32 jobs of tens of thousands of events in the soak,
    a few batches a second each), refreshing each one every ``base_s`` can cost more than
    the workers have, and ingestion starves behind it. So the wait stretches until one round
    over every waiting job costs at most ``REFRESH_SHARE`` of one worker's time: what the
    waiting jobs' refreshes read (one chunk each, the job's events over its chunks: a refresh
    recomputes the chunk new events land in) times the measured seconds per event read, over
    the share; never beyond ``MAX_REFRESH_DELAY_S``.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM(j.events::float8 / GREATEST(j.chunks, 1)), 0) "
            f"FROM {DirtyJob._meta.db_table} d JOIN {JobRollup._meta.db_table} j "
            "ON j.job = d.job")
        (events,) = cursor.fetchone() or (0,)
    round_s = float(events) * _seconds_per_event
    return min(MAX_REFRESH_DELAY_S, max(base_s, round_s / REFRESH_SHARE))


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
    """
    began = time.perf_counter()
    ordered = sorted(set(job_ids))
    total = RefreshStats()
    for at in range(0, len(ordered), JOBS_PER_TRANSACTION):
        chunk = ordered[at:at + JOBS_PER_TRANSACTION]
        total = _merge(total, _refresh_chunk(chunk, only_marked=only_marked, whole=whole))
    stats = _with_elapsed(total, began)
    _note_cost(stats)
    return stats


def mark_dirty(job_ids: Iterable[str], now: float, stale_after_s: float) -> list[str]:
    """Mark jobs whose events just changed; call inside the transaction that stored them.

    Returns the jobs that need a refresh scheduled: newly marked ones, and ones marked more
    than ``stale_after_s`` ago (their refresh task was lost, e.g. the worker died between
    commit and publish). A stale mark is re-armed at ``now``, so only the first batch after
    it goes stale schedules again: were the old time kept, a refresh queue backed up past
    ``stale_after_s`` (workers down, a broker restart) would get one more whole-job refresh
    per arriving batch, and the drain would grow quadratic (seen in the long soak: thousands
    of refresh tasks queued for 32 jobs). Rows are upserted in job order (no deadlocks
    between batches) and stay locked until the caller commits — which ``_claim_marks``
    relies on.
    """
    jobs = sorted(set(job_ids))
    if not jobs:
        return []
    table = DirtyJob._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (job, marked_at) SELECT j, %s FROM unnest(%s::text[]) AS j "
            f"ORDER BY j ON CONFLICT (job) DO UPDATE SET marked_at = CASE "
            f"WHEN {table}.marked_at < %s THEN EXCLUDED.marked_at ELSE {table}.marked_at END "
            "RETURNING job, marked_at", [now, jobs, now - stale_after_s])
        return sorted(job for job, marked_at in cursor.fetchall() if marked_at == now)


def stale_marks(older_than: float) -> list[str]:
    """Jobs marked dirty before ``older_than`` (epoch seconds): refreshes that never ran."""
    return list(DirtyJob.objects.filter(marked_at__lt=older_than)
                .order_by("job").values_list("job", flat=True))


def rollup_outdated(rollup: JobRollup | None) -> bool:
    """Whether a job's rollup row cannot be shown as it is: missing (the job's events predate
    rollups, or its first refresh has not run yet) or from before the stored chunks (it
    counts none, and its timeline may be missing)."""
    return rollup is None or not rollup.chunks


def outdated_jobs(job_ids: Iterable[str]) -> list[str]:
    """The jobs among ``job_ids`` with stored events whose rollup is outdated
    (:func:`rollup_outdated`): what a page found and asked the worker to refresh."""
    wanted = sorted(set(job_ids))
    current = set(JobRollup.objects.filter(job__in=wanted, chunks__gt=0)
                  .values_list("job", flat=True))
    return [job for job in wanted if job not in current
            and ingest.Event.objects.filter(job=job).exists()]


def _merge(a: RefreshStats, b: RefreshStats) -> RefreshStats:
    return RefreshStats(jobs=a.jobs + b.jobs, events=a.events + b.events,
                        day_rows_written=a.day_rows_written + b.day_rows_written,
                        day_rows_deleted=a.day_rows_deleted + b.day_rows_deleted,
                        days_written=tuple(sorted(set(a.days_written) | set(b.days_written))))


def _with_elapsed(stats: RefreshStats, began: float) -> RefreshStats:
    return RefreshStats(jobs=stats.jobs, events=stats.events,
                        day_rows_written=stats.day_rows_written,
                        day_rows_deleted=stats.day_rows_deleted,
                        days_written=stats.days_written,
                        elapsed_s=time.perf_counter() - began)


# --------------------------------------------------------------------------- full rebuild

_ROLLUP_MODELS = (AttemptTimeline, JobLostRollup, RecoveryPartRollup, RecoveryRollup,
                  AttemptRollup, DailyCategoryRollup, JobRollup)
#: Sums of the day rows, kept with them (``_write_days``) and checked by ``day_sum_drift``.
_DAY_SUM_MODELS = (FleetDayRollup, LabelDayRollup, JobDayRollup)


def rebuild_all() -> RefreshStats:
    """Recompute every job's rollups and chunks from every stored event (after a bug fix
    or a restore).

    One transaction: the tables are truncated first, so a concurrent ``refresh_jobs`` waits
    for the rebuild to commit and then re-reads its job. Each job is then refreshed as a
    new one, chunk by chunk: memory stays bounded by a chunk, however long the job. Chunks
    made final by retention are kept and summed as they are.
    """
    began = time.perf_counter()
    with transaction.atomic():
        # Dirty marks go too: every job is recomputed here; a batch that commits later waits
        # for this TRUNCATE's lock, then marks its job again.
        tables = ", ".join(model._meta.db_table for model in
                           (*_DAY_SUM_MODELS, *_ROLLUP_MODELS, DirtyJob, DirtyChunk))
        with connection.cursor() as cursor:
            # Django's FKs are deferred: checks still pending from earlier statements of an
            # enclosing transaction would make TRUNCATE fail, so run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"TRUNCATE {tables}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            # Final chunks stay (retention dropped their events): the rest is recomputed.
            cursor.execute(f"DELETE FROM {AttributionChunk._meta.db_table} WHERE NOT final")
            cursor.execute(f"SELECT job_id FROM {Job._meta.db_table} UNION "
                           f"SELECT job FROM {AttributionChunk._meta.db_table} ORDER BY 1")
            jobs = [job for (job,) in cursor.fetchall()]
        total = RefreshStats()
        for at in range(0, len(jobs), JOBS_PER_TRANSACTION):
            total = _merge(total, _refresh_chunk(jobs[at:at + JOBS_PER_TRANSACTION],
                                                 whole=True))
    return _with_elapsed(total, began)


def _tables() -> dict[str, str]:
    return {"fleet": FleetDayRollup._meta.db_table, "job_days": JobDayRollup._meta.db_table,
            "labels": LabelDayRollup._meta.db_table, "jobs": JobRollup._meta.db_table,
            "days": DailyCategoryRollup._meta.db_table, "bucket": bucket_sql("j.gpus")}


@dataclass(frozen=True)
class SumDrift:
    """Cells of the sum tables that differ from a fresh sum of the day rows (missing or
    extra cells included): zero and zero when the incremental upkeep is right."""

    fleet_days: int
    job_days: int
    label_days: int


def day_sum_drift(rel_tol: float = 1e-9) -> SumDrift:
    """Compare the sum tables with the day rows summed now (the soak's and the tests'
    check). Fleet cells must be equal exactly (their upkeep is exact); a job-day may
    differ by ``rel_tol`` (it is a float sum, in the engine's order or in Postgres's)."""
    t = _tables()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT day, category, SUM(seconds::numeric) AS s, "
            f"SUM(gpu_seconds::numeric) AS g FROM {t['days']} GROUP BY day, category) fresh "
            f"FULL JOIN {t['fleet']} f USING (day, category) "
            f"WHERE f.seconds IS DISTINCT FROM fresh.s "
            f"OR f.gpu_seconds IS DISTINCT FROM fresh.g")
        (fleet,) = cursor.fetchone() or (0,)
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT job, day, SUM(gpu_seconds) AS w, "
            f"COALESCE(SUM(gpu_seconds) FILTER (WHERE category = %s), 0) AS p "
            f"FROM {t['days']} GROUP BY job, day) fresh "
            f"FULL JOIN {t['job_days']} j USING (job, day) "
            f"WHERE j.job IS NULL OR fresh.w IS NULL "
            f"OR ABS(j.wall_gpu_seconds - fresh.w) > %s * GREATEST(1, ABS(fresh.w)) "
            f"OR ABS(j.productive_gpu_seconds - fresh.p) > %s * GREATEST(1, ABS(fresh.p))",
            [PRODUCTIVE, rel_tol, rel_tol])
        (job_days,) = cursor.fetchone() or (0,)
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT d.day, d.category, j.model, j.team, j.cluster, "
            f"{t['bucket']} AS gpus, SUM(d.seconds::numeric) AS s, "
            f"SUM(d.gpu_seconds::numeric) AS g FROM {t['days']} d JOIN {t['jobs']} j "
            f"ON j.job = d.job GROUP BY 1, 2, 3, 4, 5, 6) fresh "
            f"FULL JOIN {t['labels']} f USING (day, category, model, team, cluster, gpus) "
            f"WHERE f.seconds IS DISTINCT FROM fresh.s "
            f"OR f.gpu_seconds IS DISTINCT FROM fresh.g")
        (label_days,) = cursor.fetchone() or (0,)
    return SumDrift(int(fleet), int(job_days), int(label_days))


def remove_jobs(job_ids: Iterable[str]) -> int:
    """Forget the rollups of ``job_ids`` (their events are the caller's): the fleet's day
    sums lose their day rows first, under the jobs' refresh locks. Returns jobs removed.

    The one way rollups leave apart from a refresh: a bare ``JobRollup`` delete would
    cascade to the day rows behind the fleet's sums and leave them counting ghosts.
    """
    ordered = sorted(set(job_ids))
    removed = 0
    for at in range(0, len(ordered), JOBS_PER_TRANSACTION):
        chunk = ordered[at:at + JOBS_PER_TRANSACTION]
        with transaction.atomic():
            _lock_jobs(chunk)
            _write_days({job: {} for job in chunk})
            removed += JobRollup.objects.filter(job__in=chunk).delete()[1].get(
                JobRollup._meta.label, 0)
            chunked.delete_chunks(chunk)
            DirtyChunk.objects.filter(job__in=chunk).delete()
    return removed


def _copy_columns(model: type) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if f.name != "id"]  # type: ignore[attr-defined]


_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _column_getter(model: type) -> Callable[[Any], tuple[Any, ...]]:
    """Reads an instance's ``_copy_columns`` values in one call (one call per row written;
    every rollup model has several columns, so ``attrgetter`` returns a tuple)."""
    getter = _GETTERS.get(model)
    if getter is None:
        fields = [f.attname for f in model._meta.concrete_fields  # type: ignore[attr-defined]
                  if f.name != "id"]
        getter = _GETTERS[model] = operator.attrgetter(*fields)
    return getter


def _values(obj: Any) -> tuple[Any, ...]:
    """A model instance's column values in ``_copy_columns`` order, JSON as text."""
    return tuple(json.dumps(value) if isinstance(value, dict) else value
                 for value in _column_getter(type(obj))(obj))


def _json_cells(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of plain values with its JSON cells (lists) as text, ready for COPY."""
    return tuple(json.dumps(value) if isinstance(value, list) else value for value in row)


def _copy(cursor: Any, model: type, rows: list[tuple[Any, ...]], *,
          table: str | None = None) -> None:
    """COPY ``rows`` (``_copy_columns`` order) into ``model``'s table, or into ``table``."""
    if not rows:
        return
    table = table or model._meta.db_table  # type: ignore[attr-defined]
    columns = ", ".join(connection.ops.quote_name(c) for c in _copy_columns(model))
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
