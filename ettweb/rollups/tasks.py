"""Rollup refresh tasks: scheduled by ingestion for the jobs it marked dirty, asked for by a
page that found a job's rollup outdated, plus a beat safety net. The work itself lives
beside them: ``marks`` (claiming marks), ``refresh`` (recomputing), ``writers`` (storing)."""

from __future__ import annotations

import time

from celery import shared_task

from ettweb.platform.retry import waits_for_database
from ettweb.rollups.marks import MARK_STALE_AFTER_S, outdated_jobs, stale_marks
from ettweb.rollups.parking import unpark
from ettweb.rollups.refresh import refresh_jobs


@shared_task(name="ett.refresh_rollups")
@waits_for_database
def refresh_rollups(job_ids: list[str]) -> int:
    """Recompute the rollups of the still-marked jobs among ``job_ids``; returns how many.

    A job another refresh already took (its mark gone) is skipped: the batches that arrived
    while this task waited are covered by that refresh or by the mark they set after it.
    """
    return refresh_jobs([str(job) for job in job_ids], only_marked=True).jobs


@shared_task(name="ett.refresh_stale_rollups")
@waits_for_database
def refresh_stale_rollups() -> int:
    """Beat: refresh jobs whose mark is older than any scheduled refresh could be."""
    jobs = stale_marks(time.time() - MARK_STALE_AFTER_S)
    return refresh_jobs(jobs, only_marked=True).jobs if jobs else 0


@shared_task(name="ett.refresh_outdated_rollups")
@waits_for_database
def refresh_outdated_rollups(job_ids: list[str]) -> int:
    """Refresh the jobs among ``job_ids`` whose rollup a page found missing or from before
    the stored chunks, if it still is (several views may ask); returns how many."""
    jobs = outdated_jobs(str(job) for job in job_ids)
    return refresh_jobs(jobs).jobs if jobs else 0


@shared_task(name="ett.retry_refresh")
@waits_for_database
def retry_refresh(job_ids: list[str]) -> int:
    """An admin's retry of parked refreshes: forget the jobs' failures and refresh them now
    (every chunk they marked); returns how many were refreshed. One that fails the same way
    twice again is parked again."""
    jobs = [str(job) for job in job_ids]
    unpark(jobs)
    return refresh_jobs(jobs).jobs
