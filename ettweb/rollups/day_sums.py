"""Write a job's per-day rows, and keep the sums of those rows equal to them.

Only the day rows whose numbers changed are written, so a late batch rewrites exactly the
days it touches (``DailyCategoryRollup.written_at`` shows which). Pages read the sums
(:class:`FleetDayRollup` per day, :class:`LabelDayRollup` per label, :class:`JobDayRollup`
per job-day, :class:`ScopeTotalRollup` per team and cluster over all days) rather than the
rows, so each written row's change is added to them in the same transaction: no reader ever
sees the tables disagree. ``ettweb.rollups.audit`` checks them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import date
from typing import Any, Final

from django.db import connection
from django.utils import timezone

from ettweb.attribution.components import PRODUCTIVE
from ettweb.platform.bulk import server_cursor
from ettweb.rollups.buckets import gpu_bucket
from ettweb.rollups.copying import copy_rows
from ettweb.rollups.job_rows import DayKey, DayValues
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
    ScopeTotalRollup,
)

#: Two day values closer than this (relative) are "unchanged": a recompute may redistribute
#: float rounding across a long segment without any event touching that day.
SAME_REL_TOL = 1e-9

#: A job's (model, team, cluster, GPU-size bucket): the key of its label sums.
Labels = tuple[str, str, str, str]

#: One change to the label sums: (day, category, model, team, cluster, GPU bucket,
#: seconds, GPU-seconds, +1 or -1).
_LabelChange = tuple[date, str, str, str, str, str, float, float, int]

#: The key columns of each sum table and their SQL types, in lock (key) order.
_FLEET_KEY: Final = (("day", "date"), ("category", "text"))
_LABEL_KEY: Final = (*_FLEET_KEY, ("model", "text"), ("team", "text"), ("cluster", "text"),
                     ("gpus", "text"))
_SCOPE_KEY: Final = (("team", "text"), ("cluster", "text"), ("category", "text"))


def job_labels(job_ids: Sequence[str]) -> dict[str, Labels]:
    """The jobs' label keys as their rollups hold them now (jobs without one left out)."""
    return {job: (model, team, cluster, gpu_bucket(gpus)) for job, model, team, cluster, gpus
            in JobRollup.objects.filter(job__in=list(job_ids))
            .values_list("job", "model", "team", "cluster", "gpus")}


def write_days(wanted: dict[str, dict[DayKey, DayValues]],
               labels_before: Mapping[str, Labels] | None = None, *,
               new_jobs: Collection[str] = ()) -> tuple[int, int, set[date]]:
    """Write only the day rows whose numbers changed; returns (written, deleted, days).

    The fleet's day sums and the label sums get each written row's new value and lose its
    old one, and the touched job-days are summed again, in the caller's transaction. A job
    wanted with no days loses all its rows (and their share of the sums).
    ``labels_before`` holds the jobs' label keys before this refresh rewrote their rollups
    (default: unchanged); a job whose key changed moves every one of its rows from the old
    key's sums to the new one's. ``new_jobs``: jobs that had no rollup before this refresh,
    so no day rows either (nothing of theirs is read back or deleted).
    """
    if not wanted:
        return 0, 0, set()
    labels = job_labels(list(wanted))
    before = labels if labels_before is None else labels_before
    known = [job for job in wanted if job not in new_jobs]
    stored: dict[tuple[str, date, str], tuple[int, DayValues]] = {
        (str(job), day, category): (pk, (seconds, gpu_seconds))
        for pk, job, day, category, seconds, gpu_seconds in DailyCategoryRollup.objects
        .filter(job_id__in=known)
        .values_list("id", "job_id", "day", "category", "seconds", "gpu_seconds")
    } if known else {}
    moved = {job for job in wanted if job in before and before[job] != labels.get(job)}
    label_changes = _moved_label_changes(stored, wanted, moved, before, labels)
    now = timezone.now()
    inserts: list[tuple[date, str, str, float, float, Any]] = []  # copy_columns order
    updates: list[tuple[float, float, Any, int]] = []
    changes: list[tuple[str, date, str, float, float, int]] = []
    touched: set[tuple[str, date]] = set()
    fresh = set(new_jobs)  # their rows enter the sums from the table (``_NewRows``)
    for job, values in wanted.items():
        if job in fresh:
            inserts += [(day, job, category, seconds, gpu_seconds, now)
                        for (day, category), (seconds, gpu_seconds) in values.items()]
            touched.update((job, day) for day, _ in values)
            continue
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
        copy_rows(copy_cursor, DailyCategoryRollup, inserts)
    with connection.cursor() as cursor:
        if updates:
            cursor.executemany(
                f"UPDATE {DailyCategoryRollup._meta.db_table} SET seconds = %s, "
                "gpu_seconds = %s, written_at = %s WHERE id = %s", updates)
        if stored:
            cursor.execute(f"DELETE FROM {DailyCategoryRollup._meta.db_table} "
                           "WHERE id = ANY(%s)", [[pk for pk, _ in stored.values()]])
    rows = _NewRows([job for job in wanted if job in fresh], labels)
    _change_sums(FleetDayRollup._meta.db_table, _FLEET_KEY, [change[1:] for change in changes],
                 rows.selecting(_FLEET_KEY))
    _change_sums(LabelDayRollup._meta.db_table, _LABEL_KEY, label_changes,
                 rows.selecting(_LABEL_KEY))
    _change_sums(ScopeTotalRollup._meta.db_table, _SCOPE_KEY,
                 [(team, cluster, category, s, g, sign)
                  for _, category, _, team, cluster, _, s, g, sign in label_changes],
                 rows.selecting(_SCOPE_KEY))
    _rewrite_job_days(wanted, touched, set(new_jobs))
    return len(inserts) + len(updates), len(stored), {day for _, day in touched}


def _same(a: DayValues, b: DayValues) -> bool:
    return all(abs(x - y) <= SAME_REL_TOL * max(1.0, abs(x), abs(y))
               for x, y in zip(a, b, strict=True))


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


#: SQL selecting rows of the same shape as a change (key columns, s, g, sign), and its
#: parameters: the day rows just written for new jobs, added to a sum as they are.
_RowsSql = tuple[str, list[Any]]

#: Where each key column of a sum comes from when new jobs' day rows are read back: the
#: day row (``d``) or the job's labels (``l``).
_ROW_SOURCES: Final = {"day": "d.day", "category": "d.category::text", "model": "l.model",
                       "team": "l.team", "cluster": "l.cluster", "gpus": "l.gpus"}


class _NewRows:
    """The day rows of jobs new to the rollups, as :func:`_change_sums` adds them: read
    back from the table they were just copied into, in the same statement as the other
    changes. Why: an import's jobs are all new, and building each row's change in Python
    and sending it as a binary array cost more than the rows' own COPY; Postgres reads the
    rows it holds in cache for less. The values are the rows' own, so the sums are the
    same to the last digit (``numeric`` addition is exact in any order)."""

    def __init__(self, jobs: Sequence[str], labels: Mapping[str, Labels]) -> None:
        self.jobs = list(jobs)
        self.labels = {job: labels[job] for job in self.jobs if job in labels}

    def selecting(self, key: Sequence[tuple[str, str]]) -> _RowsSql | None:
        """The new rows in ``key``'s columns; a key with label columns takes only the jobs
        that have labels, as the changes of known jobs do. ``None``: no such rows."""
        sources = [_ROW_SOURCES[name] for name, _ in key]
        labelled = any(source.startswith("l.") for source in sources)
        jobs = list(self.labels) if labelled else self.jobs
        if not jobs:
            return None
        rows = (f"SELECT {', '.join(sources)}, d.seconds, d.gpu_seconds, 1 "
                f"FROM {DailyCategoryRollup._meta.db_table} AS d")
        if not labelled:
            return f"{rows} WHERE d.job = ANY(%b::text[])", [jobs]
        return (f"{rows} JOIN unnest(%b::text[], %b::text[], %b::text[], %b::text[], "
                "%b::text[]) AS l(job, model, team, cluster, gpus) ON d.job = l.job "
                "WHERE d.job = ANY(%b::text[])",
                [jobs, *map(list, zip(*self.labels.values(), strict=True)), jobs])


def _change_sums(table: str, key: Sequence[tuple[str, str]],
                 changes: Sequence[tuple[Any, ...]], rows: _RowsSql | None = None) -> None:
    """Add ``changes`` (key values in ``key`` order, then seconds, GPU-seconds, +1 or -1)
    and the ``rows`` a query selects in that shape to a sum table in one statement, cells
    in key order.

    Exact: each value enters as ``float8::numeric``, the same conversion the backfill and
    ``audit.day_sum_drift`` apply to the stored rows. Key order: concurrent refreshes that
    share cells (today's, above all) lock them in the same order, so never deadlock; the
    locks last from here to the commit that follows. A cell that reaches exactly zero (its
    last row gone) is deleted: the upsert names the cells it left at zero (by id; usually
    none), so only those are looked up again.
    """
    if not changes and rows is None:
        return
    names = ", ".join(name for name, _ in key)
    sources, params = [], []
    if changes:
        arrays = ", ".join(f"%b::{kind}[]" for _, kind in key)
        sources.append(f"SELECT * FROM unnest({arrays}, %b::float8[], %b::float8[], %b::int[])")
        params += [list(column) for column in zip(*changes, strict=True)]
    if rows is not None:
        sources.append(rows[0])
        params += rows[1]
    with server_cursor() as bound:  # the columns go as binary arrays, not SQL text
        bound.execute(
            f"INSERT INTO {table} AS f ({names}, seconds, gpu_seconds) "
            f"SELECT {names}, SUM(sign * s::numeric), SUM(sign * g::numeric) "
            f"FROM ({' UNION ALL '.join(sources)}) "
            f"AS c({names}, s, g, sign) GROUP BY {names} ORDER BY {names} "
            f"ON CONFLICT ({names}) DO UPDATE SET seconds = f.seconds + EXCLUDED.seconds, "
            f"gpu_seconds = f.gpu_seconds + EXCLUDED.gpu_seconds "
            "RETURNING CASE WHEN f.seconds = 0 AND f.gpu_seconds = 0 THEN f.id END", params)
        emptied = [pk for (pk,) in bound.fetchall() if pk is not None]
        if emptied:
            bound.execute(f"DELETE FROM {table} WHERE id = ANY(%b::int8[]) "
                          "AND seconds = 0 AND gpu_seconds = 0", [emptied])


def _rewrite_job_days(wanted: Mapping[str, Mapping[DayKey, DayValues]],
                      touched: set[tuple[str, date]], new: set[str]) -> None:
    """Replace the job-day sums of the ``touched`` (job, day) pairs from the wanted rows
    (``math.fsum``: the same sum whatever order the categories come in); the ``new`` jobs
    have none to replace."""
    if not touched:
        return
    pairs = sorted(touched)
    old = [(job, day) for job, day in pairs if job not in new]
    if old:
        with server_cursor() as bound:
            bound.execute(
                f"DELETE FROM {JobDayRollup._meta.db_table} d USING unnest(%b::text[], "
                "%b::date[]) AS t(job, day) WHERE d.job = t.job AND d.day = t.day",
                [[job for job, _ in old], [day for _, day in old]])
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
        copy_rows(copy_cursor, JobDayRollup, rows)
