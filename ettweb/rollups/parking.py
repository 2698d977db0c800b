"""Refreshes that fail, and the jobs they park (:class:`ParkedRefresh`).

Why: a refresh takes up to ``JOBS_PER_TRANSACTION`` jobs in one transaction, so one job it
cannot refresh would fail all of them, and the task's redelivery (a worker killed out of
memory) or beat's sweep of stale marks would try them all again, forever, each time
holding the job locks other workers wait on. So (``refresh.refresh_jobs``):

- before a refresh, :func:`begin` records this database backend as refreshing the jobs
  (committed at once) and says which jobs failed before: a recorded failure, or a refresh
  whose backend is gone (the worker died mid-refresh: killed, or out of memory; a dead
  worker's connection closes, so Postgres ends its backend).
- jobs that failed before are refreshed alone; a group that raises is split into its jobs.
- a job that fails alone is counted (:func:`failed`); the same error twice in a row parks it.
  Refreshes skip a parked job: it keeps its last numbers, its dirty mark stays, and admins
  see it with the error (``/admin/rollups/parkedrefresh/``) until they retry it
  (:func:`unpark`, the ``ett.retry_refresh`` task).
- a refresh that commits removes its jobs' rows (:func:`clear`), in its own transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Final

from django.db import connection
from django.utils import timezone

from ettweb.rollups.models import ParkedRefresh

logger = logging.getLogger(__name__)

#: The same error this many times in a row parks the job.
PARK_AFTER: Final = 2
#: The error recorded for a refresh whose backend vanished under it.
DIED: Final = "the worker stopped while refreshing this job (killed, or out of memory)"
#: Characters of an error kept.
ERROR_CHARS: Final = 2000
_TABLE: Final = ParkedRefresh._meta.db_table


def parked(job_ids: Sequence[str]) -> set[str]:
    """The parked jobs among ``job_ids`` (one indexed query; usually none)."""
    if not job_ids:
        return set()
    return set(ParkedRefresh.objects.filter(job__in=list(job_ids), parked_at__isnull=False)
               .values_list("job", flat=True))


def begin(job_ids: Sequence[str]) -> tuple[set[str], set[str]]:
    """Record this backend as refreshing ``job_ids``; returns the jobs that failed before
    (a failure on record, or a refresh whose backend is gone, counted now as a failure) and
    those among them that this count parked (left out of the record: skip them).
    """
    if not job_ids:
        return set(), set()
    jobs = sorted(set(job_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.job, p.running_pid IS NOT NULL AND a.pid IS NULL, p.failures > 0 "
            f"FROM {_TABLE} p LEFT JOIN pg_stat_activity a "
            "ON a.pid = p.running_pid AND a.backend_start = p.running_since "
            "WHERE p.job = ANY(%s)", [jobs])
        found = cursor.fetchall()
    now_parked: set[str] = set()
    for job, died, _ in found:
        if died:
            logger.error("rollup refresh of %r: %s", job, DIED)
            if _count(job, DIED):
                now_parked.add(job)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_TABLE} (job, error, failures, running_pid, running_since) "
            "SELECT j, '', 0, pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity "
            "WHERE pid = pg_backend_pid()) FROM unnest(%s::text[]) AS j ORDER BY j "
            "ON CONFLICT (job) DO UPDATE SET running_pid = EXCLUDED.running_pid, "
            "running_since = EXCLUDED.running_since",
            [[job for job in jobs if job not in now_parked]])
    return {job for job, died, failed_before in found if died or failed_before}, now_parked


def clear(job_ids: Sequence[str]) -> None:
    """Forget ``job_ids``' failures and running refresh: call inside the refresh's
    transaction, after its job locks, so the rows go exactly when it commits. Rows are locked
    in job order, like :func:`begin`'s upsert, so the two never deadlock."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_TABLE} WHERE job IN (SELECT job FROM {_TABLE} WHERE job = ANY(%s) "
            "ORDER BY job FOR UPDATE)", [sorted(set(job_ids))])


def failed(job: str, exc: BaseException) -> bool:
    """Count a failed refresh of ``job`` alone (its transaction rolled back); whether the
    job is parked now."""
    error = describe(exc)
    logger.error("rollup refresh of %r failed: %s", job, error, exc_info=exc)
    return _count(job, error)


def describe(exc: BaseException) -> str:
    """An error as recorded: its type and first line (what "the same error" compares)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:ERROR_CHARS]


def _count(job: str, error: str) -> bool:
    """One more failure of ``job`` with ``error``: counted on from the last if the same,
    else from one; parked at :data:`PARK_AFTER`. Whether the job is parked now."""
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_TABLE} AS p (job, error, failures, first_failed_at, last_failed_at, "
            "parked_at, running_pid, running_since) VALUES (%s, %s, 1, %s, %s, NULL, NULL, NULL) "
            "ON CONFLICT (job) DO UPDATE SET "
            "failures = CASE WHEN p.error = EXCLUDED.error THEN p.failures + 1 ELSE 1 END, "
            "error = EXCLUDED.error, last_failed_at = EXCLUDED.last_failed_at, "
            "first_failed_at = COALESCE(p.first_failed_at, EXCLUDED.first_failed_at), "
            "running_pid = NULL, running_since = NULL RETURNING failures",
            [job, error, now, now])
        (failures,) = cursor.fetchone() or (1,)
        if failures < PARK_AFTER:
            return False
        cursor.execute(f"UPDATE {_TABLE} SET parked_at = COALESCE(parked_at, %s) WHERE job = %s",
                       [now, job])
    logger.error("rollup refresh of %r parked after %d failures in a row: %s", job, failures,
                 error)
    return True


def unpark(job_ids: Iterable[str]) -> int:
    """Forget the failures of ``job_ids`` so refreshes take them again; how many were
    parked."""
    jobs = sorted(set(job_ids))
    was_parked = ParkedRefresh.objects.filter(job__in=jobs, parked_at__isnull=False).count()
    ParkedRefresh.objects.filter(job__in=jobs).delete()
    return was_parked
