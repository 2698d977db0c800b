"""Store what a refresh computed: each job's rows replace its old ones, in the refresh's
transaction.

Job rows are upserted, not replaced: the child tables join on the job, so a job row keeps
its id. The per-job children (attempts, recoveries and their parts, lost time, the
timeline) are few per job and rewritten whole with COPY; the timeline only when its digest
changed, since it is the widest. Day rows go through ``ettweb.rollups.day_sums``, which
writes only the days that changed and keeps the pages' sums with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.db import connection

from ettweb.rollups import chunk_store
from ettweb.rollups.copying import copy_columns, copy_rows, json_cells, model_values
from ettweb.rollups.day_sums import job_labels, write_days
from ettweb.rollups.job_rows import JobRows, lost_rows, part_rows
from ettweb.rollups.models import (
    AttemptRollup,
    AttemptTimeline,
    JobLostRollup,
    JobRollup,
    RecoveryPartRollup,
    RecoveryRollup,
)

#: Temporary table the job rows of a refresh are COPied into before the upsert; dropped at
#: commit, so it always has the columns of the JobRollup table of the moment.
_JOB_STAGING = "rollup_job_staging"


def write_jobs(rows: Sequence[JobRows], gone: Sequence[str]) -> tuple[int, int, set[date]]:
    """Upsert job rows, replace attempts and recoveries, rewrite the timeline of the jobs
    whose drawing changed, and diff the day rows (a gone job's with none wanted,
    so the day sums lose them before its rollup and the rest of its rows are deleted).

    Returns what :func:`day_sums.write_days` did: (rows written, rows deleted, days).
    """
    jobs = [r.job.job for r in rows]
    stored = dict(JobRollup.objects.filter(job__in=jobs).values_list("job", "timeline_digest"))
    labels_before = job_labels([job for job in jobs if job in stored])
    _upsert_jobs([r.job for r in rows])
    # A job without a rollup row has no child rows (their foreign keys say so): nothing of
    # a new job's is deleted or read back.
    known = [job for job in jobs if job in stored]
    _replace_children(AttemptRollup, known, [a for r in rows for a in r.attempts])
    _replace_children(RecoveryRollup, known, [x for r in rows for x in r.recoveries])
    _replace_children(RecoveryPartRollup, known, [x for r in rows for x in part_rows(r)])
    _replace_children(JobLostRollup, known, [x for r in rows for x in lost_rows(r.job)])
    redrawn = [r for r in rows if stored.get(r.job.job) != r.job.timeline_digest]
    if redrawn:
        _replace_children(AttemptTimeline, [r.job.job for r in redrawn if r.job.job in stored],
                          [t for r in redrawn for t in r.timeline])
    written = write_days({**{job: {} for job in gone}, **{r.job.job: r.days for r in rows}},
                         labels_before, new_jobs=[job for job in jobs if job not in stored])
    JobRollup.objects.filter(job__in=gone).delete()
    chunk_store.delete_chunks(gone)
    return written


def _upsert_jobs(jobs: Sequence[JobRollup]) -> None:
    """Insert or overwrite the job rows in one statement (rows taken in job order, so new
    jobs get their ids in job order whatever order the refresh computed them in).

    COPY fills a temporary table and ``INSERT … ON CONFLICT (job) DO UPDATE`` moves the rows:
    COPY cannot upsert, and each job row must keep its id (the child tables join on job).
    """
    if not jobs:
        return
    table = JobRollup._meta.db_table
    columns = copy_columns(JobRollup)
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    updates = ", ".join(f"{connection.ops.quote_name(c)} = EXCLUDED.{connection.ops.quote_name(c)}"
                        for c in columns if c != "job")
    raw = connection.connection
    assert raw is not None  # the caller holds a transaction, hence a connection
    with raw.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_JOB_STAGING} ON COMMIT DROP AS "
                       f"SELECT {quoted} FROM {table} WITH NO DATA")
        cursor.execute(f"DELETE FROM {_JOB_STAGING}")
        copy_rows(cursor, JobRollup, [model_values(job) for job in jobs], table=_JOB_STAGING)
        cursor.execute(f"INSERT INTO {table} ({quoted}) SELECT {quoted} FROM {_JOB_STAGING} "
                       f"ORDER BY job ON CONFLICT (job) DO UPDATE SET {updates}")


def _replace_children(model: type, jobs: list[str], rows: list[Any]) -> None:
    """Delete the jobs' rows of ``model`` and COPY the new ones in (model instances, or
    tuples already in ``copy_columns`` order)."""
    if jobs:
        model.objects.filter(job_id__in=jobs).delete()  # type: ignore[attr-defined]
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as cursor:
        copy_rows(cursor, model, [json_cells(row) if isinstance(row, tuple) else model_values(row)
                                  for row in rows])
