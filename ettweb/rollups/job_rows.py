"""The rollup rows one job's attribution makes, unsaved: the single place numbers are copied
from the engine's answer into the tables, so every refresh path stores the same thing.

Nothing here touches the database; ``ettweb.rollups.writers`` stores what this builds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.utils import timezone

from ettweb.attribution import chunk_sums
from ettweb.attribution.completeness import Finding
from ettweb.attribution.engine import JobAttribution
from ettweb.attribution.lanes import Timeline
from ettweb.rollups.models import AttemptRollup, JobRollup, RecoveryRollup

DayKey = tuple[date, str]  # (UTC day, category)
DayValues = tuple[float, float]  # (seconds, GPU-seconds)

#: Column order of the timeline's rows (``copy_columns`` of the model; a test holds them
#: equal). Plain tuples, not model instances.
TIMELINE_COLUMNS = ("job", "attempt", "bin_s", "pieces")


@dataclass(frozen=True)
class JobRows:
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


def job_rows(attribution: JobAttribution, days: dict[DayKey, DayValues],
             timeline: Sequence[Timeline], *, events: int, chunk_count: int,
             findings: Sequence[Finding] | None = None) -> JobRows:
    """Every rollup row of one job, unsaved.

    ``attribution`` and ``days`` are the job's chunks summed up (``chunk_sums.assemble``),
    ``timeline`` the job page's category timeline, ``events`` the stored events attributed,
    ``findings`` the completeness check's (``None``: not checked).
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
        instrumentation=None if findings is None else {
            "findings": [finding.to_json() for finding in findings]},
    )
    repeated = attribution.repeated_steps_by_attempt
    attempts = [AttemptRollup(job_id=attribution.job, attempt=w.attempt, start=w.start,
                              end=w.end, status=w.status, gpus=w.gpus,
                              repeated_steps=repeated.get(w.attempt, 0)) for w in windows]
    return JobRows(job, attempts, _recovery_rows(attribution), days, rows)


def _recovery_rows(attribution: JobAttribution) -> list[RecoveryRollup]:
    """One row per ``Recovery`` of the engine (§3.8), with its GPU-weighted split."""
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


def _timeline_rows(job: str, timeline: Sequence[Timeline]) -> tuple[list[tuple[Any, ...]], str]:
    """The job page's category timeline as rows in ``TIMELINE_COLUMNS`` order, and their
    digest (``repr`` of plain tuples of str, int and float is exact and stable)."""
    rows = [(job, row.attempt, row.bin_s, list(row.pieces)) for row in timeline]
    return rows, hashlib.blake2b(repr(rows).encode(), digest_size=16).hexdigest()


def lost_rows(job: JobRollup) -> list[tuple[str, str, float]]:
    """The job's ``lost_gpu_s`` as :class:`JobLostRollup` rows (``copy_columns`` order)."""
    return [(job.job, category, float(gpu_s)) for category, gpu_s in
            sorted(job.lost_gpu_s.items()) if gpu_s]


def part_rows(rows: JobRows) -> list[tuple[str, int, date, str, float]]:
    """The job's recoveries' parts as :class:`RecoveryPartRollup` rows (``copy_columns``
    order: job, attempt, day, category, GPU-seconds)."""
    return [(r.job_id, r.attempt, r.day, category, float(gpu_s))
            for r in rows.recoveries for category, gpu_s in sorted(r.by_category_gpu.items())
            if gpu_s]
