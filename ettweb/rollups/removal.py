"""Remove jobs' rollups when their events go, keeping the day sums true.

The one way rollups leave apart from a refresh: a bare ``JobRollup`` delete would cascade to
the day rows behind the fleet's sums and leave the sums counting ghosts.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from ettweb.rollups import chunk_store
from ettweb.rollups.day_sums import write_days
from ettweb.rollups.models import DirtyChunk, JobRollup, RankProgress
from ettweb.rollups.refresh import JOBS_PER_TRANSACTION, lock_jobs


def remove_jobs(job_ids: Iterable[str]) -> int:
    """Forget the rollups of ``job_ids`` (their events are the caller's): the fleet's day
    sums lose their day rows first, under the jobs' refresh locks. Returns jobs removed."""
    ordered = sorted(set(job_ids))
    removed = 0
    for at in range(0, len(ordered), JOBS_PER_TRANSACTION):
        batch = ordered[at:at + JOBS_PER_TRANSACTION]
        with transaction.atomic():
            lock_jobs(batch)
            write_days({job: {} for job in batch})
            removed += JobRollup.objects.filter(job__in=batch).delete()[1].get(
                JobRollup._meta.label, 0)
            chunk_store.delete_chunks(batch)
            DirtyChunk.objects.filter(job__in=batch).delete()
            RankProgress.objects.filter(job__in=batch).delete()
    return removed
