"""Which jobs wait for a refresh, and how long their refresh should wait.

Ingestion marks a job dirty (:class:`DirtyJob`) in the transaction that stores its events
and schedules one refresh per newly marked job; batches that arrive meanwhile find the mark
set and schedule nothing, so a busy job is refreshed once per wait, not once per batch. A
refresh claims the marks of its jobs before it reads their events. The wait stretches with
the work waiting (:func:`refresh_delay_s`) so refreshes never crowd out ingestion. Pages
that find a rollup missing or outdated ask for a refresh too (:func:`outdated_jobs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from django.db import connection

from ettweb.ingest import models as ingest
from ettweb.rollups.models import DirtyJob, JobRollup, ParkedRefresh

if TYPE_CHECKING:
    from ettweb.rollups.refresh import RefreshStats

#: A dirty mark older than this has lost its refresh task (a worker died between commit and
#: publish): the next batch of the job schedules one again, and beat sweeps the rest.
MARK_STALE_AFTER_S = 60.0
#: Longest a refresh waits after its job's first new batch: below ``MARK_STALE_AFTER_S``, so
#: a waiting refresh is never taken for a lost one.
MAX_REFRESH_DELAY_S = 45.0
#: The share of one worker's time the refreshes of the waiting jobs may take (see
#: :func:`refresh_delay_s`).
REFRESH_SHARE = 0.25
#: Seconds a refresh costs per stored event before this process has timed one: a cautious
#: guess (a slow, busy machine), replaced by what the first refreshes measure.
_FIRST_SECONDS_PER_EVENT = 20e-6
_seconds_per_event = _FIRST_SECONDS_PER_EVENT


def mark_dirty(job_ids: Iterable[str], now: float, stale_after_s: float) -> list[str]:
    """Mark jobs whose events just changed; call inside the transaction that stored them.

    Returns the jobs that need a refresh scheduled: newly marked ones, and ones marked more
    than ``stale_after_s`` ago (their refresh task was lost, e.g. the worker died between
    commit and publish). A stale mark is re-armed at ``now``, so only the first batch after
    it goes stale schedules again: were the old time kept, a refresh queue backed up past
    ``stale_after_s`` (workers down, a broker restart) would get one more whole-job refresh
    per arriving batch, and the drain would grow quadratic. Rows are upserted in job order
    (no deadlocks between batches) and stay locked until the caller commits — which
    :func:`claim_marks` relies on.
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


def claim_marks(job_ids: Sequence[str]) -> set[str]:
    """Delete the dirty marks of ``job_ids``; returns the jobs that were marked.

    Runs after the refresh's job locks and before the events are read. A batch still storing
    events of one of these jobs holds its mark's row lock (:func:`mark_dirty`): the DELETE
    waits for that batch to commit, so the read that follows sees its events. A batch that
    commits after the DELETE finds no mark, sets a new one and schedules another refresh.
    """
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DirtyJob._meta.db_table} WHERE job = ANY(%s) RETURNING job",
                       [list(job_ids)])
        return {row[0] for row in cursor.fetchall()}


def stale_marks(older_than: float) -> list[str]:
    """Jobs marked dirty before ``older_than`` (epoch seconds): refreshes that never ran.
    Parked jobs are left out: their marks wait for an admin (``rollups.parking``)."""
    parked = ParkedRefresh.objects.filter(parked_at__isnull=False).values("job")
    return list(DirtyJob.objects.filter(marked_at__lt=older_than).exclude(job__in=parked)
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


def refresh_delay_s(base_s: float) -> float:
    """How long a newly marked job's refresh should wait: ``base_s`` (the debounce), or
    longer when the jobs now waiting would otherwise keep the workers refreshing.

    Why: a running job is marked again by its next batch as soon as its refresh took the
    mark. With many large jobs marked at once, each receiving batches every second or so,
    refreshing each one every ``base_s`` can cost more than the workers have, and ingestion
    starves behind it. So the wait stretches until one round over every waiting job costs at
    most ``REFRESH_SHARE`` of one worker's time: what the waiting jobs' refreshes read (one
    chunk each, the job's events over its chunks: a refresh recomputes the chunk new events
    land in) times the measured seconds per event read, over the share; never beyond
    ``MAX_REFRESH_DELAY_S``.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM(j.events::float8 / GREATEST(j.chunks, 1)), 0) "
            f"FROM {DirtyJob._meta.db_table} d JOIN {JobRollup._meta.db_table} j "
            "ON j.job = d.job")
        (events,) = cursor.fetchone() or (0,)
    round_s = float(events) * _seconds_per_event
    return min(MAX_REFRESH_DELAY_S, max(base_s, round_s / REFRESH_SHARE))


def note_cost(stats: RefreshStats) -> None:
    """Fold one refresh's seconds per event into this process's running estimate (refreshes
    too small to time well are left out)."""
    global _seconds_per_event
    if stats.events >= 1000 and stats.elapsed_s > 0:
        _seconds_per_event = 0.8 * _seconds_per_event + 0.2 * stats.elapsed_s / stats.events
