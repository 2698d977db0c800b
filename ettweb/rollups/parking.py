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
from dataclasses import dataclass
from typing import Any, Final

from django.db import connection, transaction
from django.utils import timezone

from ettweb.ingest.quarantine import error_text
from ettweb.rollups.models import ParkedRefresh

logger = logging.getLogger(__name__)

#: The same error this many times in a row parks the job.
PARK_AFTER: Final = 2
#: The error recorded for a refresh whose backend vanished under it.
DIED: Final = "the worker stopped while refreshing this job (killed, or out of memory)"
_TABLE: Final = ParkedRefresh._meta.db_table


@dataclass(frozen=True)
class Begun:
    """What :func:`begin` found: the jobs to skip (parked, before or by this count) and
    those to refresh alone (they failed before)."""

    parked: frozenset[str] = frozenset()
    failed_before: frozenset[str] = frozenset()


def begin(job_ids: Sequence[str]) -> Begun:
    """Record this backend as refreshing ``job_ids`` but the parked ones; returns those
    (:attr:`Begun.parked`) and the jobs that failed before (a failure on record, or a refresh
    whose backend is gone, counted now as a failure).

    One statement reads the records and writes this refresh's, committed without waiting for
    the disk (``synchronous_commit`` off, when no transaction encloses it: a record lost in a
    crash costs one death not counted): a refresh of one live job pays this every time.
    Backends are looked up only for records that name one (rare).
    """
    if not job_ids:
        return Begun()
    jobs = sorted(set(job_ids))
    found = _record_running(jobs)
    backends = _alive({(pid, since) for _, _, pid, since, _ in found if pid is not None})
    skip = {job for job, was_parked, _, _, _ in found if was_parked}
    failed_before: set[str] = set()
    again: list[str] = []
    for job, was_parked, pid, since, failures in found:
        if was_parked:
            continue
        died = pid is not None and (pid, since) not in backends
        if died:
            logger.error("rollup refresh of %r: %s", job, DIED)
            if _count(job, DIED):  # which forgot this refresh's record
                skip.add(job)
                continue
            again.append(job)
        if died or failures:
            failed_before.add(job)
    if again:
        _record_running(again)
    return Begun(frozenset(skip), frozenset(failed_before))


def _record_running(jobs: list[str]) -> list[tuple[str, bool, int | None, Any, int]]:
    """Write this backend as refreshing ``jobs`` (parked ones left as they are); returns the
    records as they were: (job, parked, running pid, its backend's start, failures)."""
    pid, since = _backend()
    with transaction.atomic(), connection.cursor() as cursor:
        if not connection.savepoint_ids:  # the outermost block: the commit is its own
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        cursor.execute(
            f"WITH old AS (SELECT job, parked_at IS NOT NULL, running_pid, running_since, "
            f"failures FROM {_TABLE} WHERE job = ANY(%(jobs)s)), "
            f"up AS (INSERT INTO {_TABLE} AS p (job, error, failures, running_pid, "
            "running_since) SELECT j, '', 0, %(pid)s, %(since)s FROM "
            "unnest(%(jobs)s::text[]) AS j ORDER BY j ON CONFLICT (job) DO UPDATE SET "
            "running_pid = EXCLUDED.running_pid, running_since = EXCLUDED.running_since "
            "WHERE p.parked_at IS NULL) SELECT * FROM old",
            {"jobs": jobs, "pid": pid, "since": since})
        return list(cursor.fetchall())


def _backend() -> tuple[int, Any]:
    """This connection's backend pid and start, asked once per database connection."""
    cached = getattr(connection, "_ett_backend", None)
    if cached is None or connection.connection is None or cached[0] is not connection.connection:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid, backend_start FROM pg_stat_activity "
                           "WHERE pid = pg_backend_pid()")
            row = cursor.fetchone()
        cached = (connection.connection, row)  # the query opened it if it was not
        connection._ett_backend = cached  # type: ignore[attr-defined]
    return cached[1][0], cached[1][1]


def _alive(backends: set[tuple[int, Any]]) -> set[tuple[int, Any]]:
    """Those of ``backends`` (pid, start) that Postgres still runs."""
    if not backends:
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE pid = ANY(%s)",
                       [[pid for pid, _ in backends]])
        return {row for row in cursor.fetchall() if row in backends}


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
    error = error_text(exc)  # what "the same error" compares: its type and first line
    logger.error("rollup refresh of %r failed: %s", job, error, exc_info=exc)
    return _count(job, error)


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
