"""Reading a rollout's windows from the per-day rollups: per-job sums, lost time, the trend.

Everything comes from the rollups (job x UTC day sums, and the per-category day rows), never
from an event scan, so an impact costs a few grouped SQL reads whatever the fleet's event
count. What comes out is what the arithmetic needs and no more: each job's six window sums
(:data:`~ettweb.statistics.estimators.COLUMNS`), its GPUs, whether the scope holds it,
the treated jobs' lost time per category, and optionally the per-day trend.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np

from ettweb.attribution.components import PRODUCTIVE, UNKNOWN_COMPONENT
from ettweb.queries.base import aggregating, phase_components
from ettweb.queries.impact.result import TrendDay
from ettweb.queries.impact.windows import Windows
from ettweb.rollouts.scope import Scope
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
)
from ettweb.statistics import estimators
from ettweb.statistics.estimators import Group, ratio


@dataclass
class JobSums:
    """Per job (sorted by id): the six window sums (``estimators.COLUMNS``), whether it has
    rows in each window, its GPUs, and whether the scope holds it."""

    ids: list[str]
    values: np.ndarray
    in_before: np.ndarray
    in_after: np.ndarray
    gpus: np.ndarray
    in_scope: np.ndarray

    def group(self, mask: np.ndarray) -> Group:
        return Group(self.values[mask], self.in_before[mask], self.in_after[mask],
                     self.gpus[mask])


def _window_filter(windows: Windows) -> tuple[str, list[Any]]:
    """SQL condition on ``d.day`` for both windows, and its parameters."""
    sql, params = "(d.day BETWEEN %s AND %s)", [windows.before[0], windows.before[1]]
    if windows.after is not None:
        sql = f"({sql} OR d.day BETWEEN %s AND %s)"
        params += [windows.after[0], windows.after[1]]
    return sql, params


@dataclass
class WindowRead:
    """What one scan of the windows' day rows gives: the per-job sums (the bootstrap's
    input), the treated jobs' lost GPU-s per category in each window (key: after?), and the
    per-day treated and control sums of the trend (when asked)."""

    jobs: JobSums
    lost: dict[bool, dict[str, float]]
    trend: list[TrendDay]


def _in_scope_jobs(scope: Scope) -> list[str] | None:
    """Every job with a rollup that ``scope`` holds (None for the fleet: every job).

    Matched by :meth:`Scope.matches` — the one definition of a scope — on the job rollups'
    labels. Postgres first keeps the rows whose labels the scope's lists name (the same
    exact equality), so a team's rollout reads that team's jobs rather than the fleet's.
    """
    if scope.is_fleet:
        return None
    rows = JobRollup.objects.filter(**{f"{label}__in": list(values)
                                       for label, values in scope.label_lists()})
    return sorted(job for job, model, team, cluster in rows.values_list(
        "job", "model", "team", "cluster") if scope.matches(job, model, team, cluster))


#: The treated jobs as a relation to join: one array parameter, unnested. Not a temporary
#: table: creating and filling one is a write, and a read never writes (Postgres refuses
#: it in a read-only transaction, as on a standby). Postgres sizes the join from the
#: array's length, which it knows.
_TREATED_JOBS = "unnest(%s::text[]) AS t(job)"


def read_windows(windows: Windows, scope: Scope, component: str, *,
                 with_trend: bool) -> WindowRead:
    """The windows' per-job sums and per-day trend (one scan of the job-day sums, grouped
    two ways at once with GROUPING SETS), each job's lost time of ``component`` per window,
    and the treated jobs' lost time per category.

    Why job-days: each job's wall and productive GPU-s per window is all the bootstrap
    needs, and the job-day sums hold it in one row per job and day where the category rows
    hold one per category. The read runs without parallel workers: on a small server they
    only compete with the request, and a split scan adds a job's rows in a different order
    on every run (the draws' digest reads the sums to a few significant digits, see
    :mod:`ettweb.queries.impact.draws`, so that costs no bootstrap, but the page's numbers
    should not flicker). Jobs are sorted
    here, by code point, not by the database's collation: the bootstrap draws job indices,
    so the order must not depend on the server's locale for the interval to be the same
    everywhere. The rollout's own day is in neither window, so in no number.
    """
    treated = _in_scope_jobs(scope)
    where, params = _window_filter(windows)
    in_scope = "TRUE" if treated is None else "t.job IS NOT NULL"
    join = "" if treated is None else f" LEFT JOIN {_TREATED_JOBS} ON t.job = d.job"
    sets = ["(job, after, in_scope)"] + (["(day, in_scope)"] if with_trend else [])
    day = "day" if with_trend else "NULL::date"  # a column outside every set may not show
    sql = (f"SELECT GROUPING(job), job, {day}, after, in_scope, SUM(wall), SUM(productive) "
           f"FROM (SELECT d.job, d.day, d.wall_gpu_seconds AS wall, "
           f"d.productive_gpu_seconds AS productive, d.day > %s AS after, "
           f"{in_scope} AS in_scope FROM {JobDayRollup._meta.db_table} d{join} "
           f"WHERE {where}) AS x GROUP BY GROUPING SETS ({', '.join(sets)})")
    args: list[Any] = [windows.rollout_day, *([] if treated is None else [treated]), *params]
    with aggregating() as cursor:
        cursor.execute("SELECT set_config('max_parallel_workers_per_gather', '0', true)")
        cursor.execute(sql, args)
        rows = cursor.fetchall()
        lost = _treated_lost(cursor, windows, scope, treated)
        own = _component_lost(cursor, windows, component)
        gpus = _job_gpus(cursor, windows)
    per_job = sorted((job, bool(late), bool(scoped), float(wall), float(productive))
                     for no_job, job, _, late, scoped, wall, productive in rows if not no_job)
    sums: dict[date, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for no_job, _, day_, _, scoped, wall, productive in rows:
        if no_job:  # the per-day set
            offset = 0 if scoped else 2
            sums[day_][offset] += float(wall)
            sums[day_][offset + 1] += float(productive)
    trend = [TrendDay(d, ratio(v[1], v[0]), ratio(v[3], v[2])) for d, v in sorted(sums.items())]
    return WindowRead(_jobs_of(per_job, own, gpus), lost, trend)


def _component_categories(component: str) -> tuple[str, list[str]]:
    """SQL condition on ``d.category`` for the categories the phase map charges to
    ``component`` (``unknown`` holds every unmapped category too), and its parameter."""
    mapping = phase_components()
    if component == UNKNOWN_COMPONENT:
        others = [c for c, owner in mapping.items() if owner != UNKNOWN_COMPONENT]
        return "d.category <> ALL(%s)", [*others, PRODUCTIVE]
    return "d.category = ANY(%s)", [c for c, owner in mapping.items() if owner == component]


def _component_lost(cursor: Any, windows: Windows,
                    component: str) -> dict[tuple[str, bool], float]:
    """(job, after?) → the job's lost GPU-s of ``component`` in that window (§6.1)."""
    where, params = _window_filter(windows)
    condition, categories = _component_categories(component)
    cursor.execute(f"SELECT d.job, d.day > %s, SUM(d.gpu_seconds) "
                   f"FROM {DailyCategoryRollup._meta.db_table} d "
                   f"WHERE {where} AND {condition} GROUP BY 1, 2",
                   [windows.rollout_day, *params, categories])
    return {(job, bool(late)): float(gpu_s) for job, late, gpu_s in cursor.fetchall()}


def _job_gpus(cursor: Any, windows: Windows) -> dict[str, int]:
    """The GPUs of every job with a row in a window (its rollup's: the last attempt's),
    which the adjusted estimate's strata read."""
    where, params = _window_filter(windows)
    cursor.execute(f"SELECT j.job, j.gpus FROM {JobRollup._meta.db_table} j WHERE EXISTS "
                   f"(SELECT 1 FROM {JobDayRollup._meta.db_table} d "
                   f"WHERE d.job = j.job AND {where})", params)
    return dict(cursor.fetchall())


def _treated_lost(cursor: Any, windows: Windows, scope: Scope,
                  treated: list[str] | None) -> dict[bool, dict[str, float]]:
    """The treated jobs' lost GPU-s per category in each window (key: after?).

    From the sums that hold exactly those jobs: the fleet's day sums for a fleet-wide
    rollout; the label sums of the scope's models, teams and clusters for a scope of labels
    alone (a scope matches a job's rollup labels exactly, as the label sums are kept); the
    treated jobs' own day rows when the scope names a job pattern.
    """
    where, params = _window_filter(windows)
    lists = scope.label_lists() if treated is not None and scope.job_pattern is None else []
    labels = "".join(f" AND d.{label} = ANY(%s)" for label, _ in lists)
    label_params = [list(values) for _, values in lists]
    jobs: list[Any] = []
    if treated is None:
        source = FleetDayRollup._meta.db_table + " d"
    elif scope.job_pattern is None:
        source = LabelDayRollup._meta.db_table + " d"
    else:
        source = f"{DailyCategoryRollup._meta.db_table} d JOIN {_TREATED_JOBS} ON t.job = d.job"
        jobs = [treated]
    cursor.execute(f"SELECT d.day > %s, d.category, SUM(d.gpu_seconds) FROM {source} "
                   f"WHERE {where} AND d.category <> %s{labels} GROUP BY 1, 2",
                   [windows.rollout_day, *jobs, *params, PRODUCTIVE, *label_params])
    lost: dict[bool, dict[str, float]] = {False: {}, True: {}}
    for late, category, gpu_s in cursor.fetchall():
        lost[bool(late)][category] = float(gpu_s)
    return lost


def _jobs_of(per_job: Sequence[tuple[str, bool, bool, float, float]],
             own: Mapping[tuple[str, bool], float], gpus: Mapping[str, int]) -> JobSums:
    """(job, after?, in scope?, wall, productive) rows, sorted by job, as arrays, with each
    job's lost GPU-s of the rollout's component and its GPUs."""
    index: dict[str, int] = {}
    scoped: list[bool] = []
    for job, _, in_scope, _, _ in per_job:
        if job not in index:
            index[job] = len(index)
            scoped.append(in_scope)
    values = np.zeros((len(index), len(estimators.COLUMNS)))
    present = np.zeros((len(index), 2), dtype=bool)
    for job, after, _, wall, productive in per_job:
        i, col = index[job], 2 if after else 0
        values[i, col], values[i, col + 1] = wall, productive
        values[i, 5 if after else 4] = own.get((job, after), 0.0)
        present[i, 1 if after else 0] = True
    return JobSums(list(index), values, present[:, 0], present[:, 1],
                   np.array([gpus.get(job, 1) for job in index], dtype=np.int64),
                   np.array(scoped, dtype=bool))
