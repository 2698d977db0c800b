"""Rebuild: recompute every job's rollups and chunks from every stored event.

For when the stored numbers cannot be trusted to follow from the events by refreshes alone:
after a fix to the attribution rules, a restore, or an upgrade from before rollups. Run by
``manage.py ett_rebuild_rollups``.
"""

from __future__ import annotations

import time

from django.db import connection, transaction

from ettweb.ingest.models import Job
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
    ParkedRefresh,
    RankProgress,
    RecoveryPartRollup,
    RecoveryRollup,
    ScopeTotalRollup,
)
from ettweb.rollups.refresh import JOBS_PER_TRANSACTION, RefreshStats, refresh_group

_ROLLUP_MODELS = (AttemptTimeline, JobLostRollup, RecoveryPartRollup, RecoveryRollup,
                  AttemptRollup, DailyCategoryRollup, JobRollup)
#: Sums of the day rows, kept with them (``day_sums.write_days``) and checked by
#: ``audit.day_sum_drift``.
_DAY_SUM_MODELS = (FleetDayRollup, LabelDayRollup, JobDayRollup, ScopeTotalRollup)


def rebuild_all() -> RefreshStats:
    """Recompute every job's rollups and chunks from every stored event.

    One transaction: the tables are truncated first, so a concurrent ``refresh_jobs`` waits
    for the rebuild to commit and then re-reads its job. Each job is then refreshed as a
    new one, chunk by chunk: memory stays bounded by a chunk, however long the job. Chunks
    made final by retention are kept and summed as they are. Parked refreshes are forgotten
    first (a rebuild follows a fix); a job that fails the same way twice again is parked
    again, and the others are rebuilt (``rollups.parking``).
    """
    began = time.perf_counter()
    with transaction.atomic():
        # Dirty marks go too: every job is recomputed here; a batch that commits later waits
        # for this TRUNCATE's lock, then marks its job again.
        tables = ", ".join(model._meta.db_table for model in
                           (*_DAY_SUM_MODELS, *_ROLLUP_MODELS, DirtyJob, DirtyChunk,
                            ParkedRefresh, RankProgress))
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
            total = total.merged(refresh_group(jobs[at:at + JOBS_PER_TRANSACTION], whole=True))
    return total.timed(began)
