"""Rollout impact (ETT_SPEC §6): ETT% before and after a rollout, with an honest interval.

Everything comes from the per-day rollups (job x UTC day x category GPU-seconds), never from
an event scan, so an impact answer costs three grouped SQL reads whatever the fleet's event
count. The definitions, in short:

* windows are whole UTC days; the rollout's own day belongs to neither; ``before`` is the W
  days ending the day before, ``after`` the W days starting the day after; an ``after`` that
  reaches past the last day holding data is ``partial`` and reported with the days it has;
* treated = in-scope jobs with a day row in either window, control = the out-of-scope ones
  (none for a fleet-wide rollout); ETT% of a group = Σ productive / Σ wall GPU-seconds;
* the 95% interval is a percentile bootstrap over jobs: B draws, each resampling the treated
  jobs (and, independently, the control jobs) with replacement, every job with all its day
  rows in both windows; the generator is seeded with the rollout's id, so the same rollout
  shows the same interval on every load; fewer than 5 jobs in a group in either window gives
  no interval.

Why resample jobs and not days: jobs are the independent units (a job's days share its
model, size and failures), so the interval says how much the answer depends on which jobs
happened to run. The bootstrap is vectorized with numpy: a draw is a row of job indices, and
a chunk of draws is summed with one gather (2,000 draws over thousands of jobs in tens of ms).

The verdict is ours, not the spec's: ``improved`` when the deciding interval lies above 0,
``regressed`` when it lies below, otherwise ``inconclusive``. The deciding interval is the
difference-in-differences one when the rollout has a control with an interval (it removes
what moved the whole fleet at the same time), else the treated change's.

Beside §6's numbers (the page labels them *unadjusted*) the result carries the rollout's own
component (§6.1: its lost share, from the same draws), the adjusted estimate (§6.2:
post-stratified by job size), the overlapping rollouts (§6.4) and, for each inconclusive
verdict, what it would take to decide. The arithmetic lives in
:mod:`ettweb.rollouts.estimators`, which the calibration benchmark holds to its
false-positive rate, power and coverage; this module reads the rollups into it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Literal

import numpy as np
from django.db.models import Max

from ettweb.attribution.components import PRODUCTIVE, UNKNOWN_COMPONENT, component_of
from ettweb.components.logic import known_components
from ettweb.deferred import send_once
from ettweb.queries.base import aggregating, phase_components
from ettweb.rollouts import estimators
from ettweb.rollouts.estimators import (
    MIN_JOBS_FOR_INTERVAL,
    Detectability,
    Group,
    Stratified,
    as_pair,
    interval,
)
from ettweb.rollouts.models import BootstrapDraws, Rollout
from ettweb.rollouts.scope import Scope
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
)
from ettweb.text import iso_utc

DEFAULT_WINDOW_DAYS: Final = 14
MIN_WINDOW_DAYS: Final = 1
MAX_WINDOW_DAYS: Final = 90
Verdict = Literal["improved", "regressed", "inconclusive"]
VERDICTS: Final[tuple[Verdict, ...]] = ("improved", "regressed", "inconclusive")
#: The rollout's own component (ETT_SPEC §6.1): its lost share went down, up, or no call.
ComponentVerdict = Literal["reduced", "increased", "inconclusive"]
COMPONENT_VERDICTS: Final[tuple[ComponentVerdict, ...]] = ("reduced", "increased",
                                                           "inconclusive")
#: What the adjusted estimate is called in the API (``docs/rollouts.md`` explains it).
ADJUSTED_METHOD: Final = "size-stratified"
#: The worker's task that keeps one rollout's draws at one window (``ettweb.rollouts.warm``).
WARM_TASK: Final = "ett.warm_rollout_impact"
#: Seconds before another read of the same impact asks the worker again.
ASK_AGAIN_S: Final = 30.0


class WindowError(ValueError):
    """A window outside 1-90 days (the API answers 400 with this message)."""


@dataclass(frozen=True)
class ImpactQuery:
    """The impact of rollout ``rollout_id`` over windows of ``window_days`` UTC days.

    ``with_trend`` adds the per-day treated and control ETT% the rollout page draws.
    """

    rollout_id: int
    window_days: int = DEFAULT_WINDOW_DAYS
    with_trend: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.window_days, bool) or not isinstance(self.window_days, int):
            raise WindowError("must be a whole number of days")
        if not MIN_WINDOW_DAYS <= self.window_days <= MAX_WINDOW_DAYS:
            raise WindowError(f"must be between {MIN_WINDOW_DAYS} and {MAX_WINDOW_DAYS} "
                              f"days, not {self.window_days}")


@dataclass(frozen=True)
class Windows:
    """The rollout's day and its two windows (inclusive UTC days); ``after`` is None when
    no day of it holds data yet."""

    rollout_day: date
    before: tuple[date, date]
    after: tuple[date, date] | None
    partial: bool

    @property
    def after_days(self) -> int:
        return 0 if self.after is None else (self.after[1] - self.after[0]).days + 1


@dataclass(frozen=True)
class GroupImpact:
    """Treated or control: jobs per window, ETT% before/after, the change and its interval."""

    jobs_before: int
    jobs_after: int
    before_ett_pct: float | None
    after_ett_pct: float | None
    change_pts: float | None
    change_rel: float | None
    ci95_pts: tuple[float, float] | None

    @property
    def enough_jobs(self) -> bool:
        return min(self.jobs_before, self.jobs_after) >= MIN_JOBS_FOR_INTERVAL

    def as_api(self) -> dict[str, Any]:
        return {"jobs_before": self.jobs_before, "jobs_after": self.jobs_after,
                "before_ett_pct": self.before_ett_pct, "after_ett_pct": self.after_ett_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel,
                "ci95_pts": list(self.ci95_pts) if self.ci95_pts else None}


@dataclass(frozen=True)
class ComponentShift:
    """One component's lost share of the treated jobs' wall time, in points, per window."""

    component: str
    before_lost_pct: float | None
    after_lost_pct: float | None

    @property
    def change_pts(self) -> float | None:
        if self.before_lost_pct is None or self.after_lost_pct is None:
            return None
        return self.after_lost_pct - self.before_lost_pct

    @property
    def change_rel(self) -> float | None:
        """after / before - 1 (ETT_SPEC §6 asks for both ways); None from a zero share."""
        if not self.before_lost_pct or self.after_lost_pct is None:
            return None
        return self.after_lost_pct / self.before_lost_pct - 1.0

    def as_api(self) -> dict[str, float | None]:
        return {"before_lost_pct": self.before_lost_pct, "after_lost_pct": self.after_lost_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel}


@dataclass(frozen=True)
class Inconclusive:
    """What an inconclusive verdict would take (see :func:`estimators.detectability`): the
    smallest change this window detects with 80% power, and the days each window would
    need for a change of the current estimate's size (None: the estimate is 0)."""

    mde_pts: float
    days_needed: int | None
    more_days: int | None

    @classmethod
    def of(cls, found: Detectability | None, window_days: int) -> Inconclusive | None:
        if found is None:
            return None
        return cls(found.mde_pts, found.days_needed, found.more_days(window_days))

    def as_api(self) -> dict[str, Any]:
        return {"mde_pts": self.mde_pts, "days_needed": self.days_needed,
                "more_days": self.more_days}


@dataclass(frozen=True)
class LostShare:
    """One group's lost share of the rollout's component (ETT_SPEC §6.1), in points."""

    before_lost_pct: float | None
    after_lost_pct: float | None
    ci95_pts: tuple[float, float] | None

    @property
    def change_pts(self) -> float | None:
        if self.before_lost_pct is None or self.after_lost_pct is None:
            return None
        return self.after_lost_pct - self.before_lost_pct

    @property
    def change_rel(self) -> float | None:
        return estimators.percent_change(self.after_lost_pct, self.before_lost_pct)

    def as_api(self) -> dict[str, Any]:
        return {"before_lost_pct": self.before_lost_pct, "after_lost_pct": self.after_lost_pct,
                "change_pts": self.change_pts, "change_rel": self.change_rel,
                "ci95_pts": as_pair(self.ci95_pts)}


@dataclass(frozen=True)
class ComponentEffect:
    """ETT_SPEC §6.1: the rollout's component's lost share, treated and control, with
    intervals from the same draws as ETT%'s, and its verdict."""

    component: str
    treated: LostShare
    control: LostShare | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    verdict: ComponentVerdict
    verdict_reason: str
    inconclusive: Inconclusive | None

    @property
    def deciding_pts(self) -> float | None:
        """The change the verdict reads: the DiD's when it has an interval."""
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    @property
    def deciding_ci95_pts(self) -> tuple[float, float] | None:
        return self.did_ci95_pts if self.did_ci95_pts is not None else self.treated.ci95_pts

    def as_api(self) -> dict[str, Any]:
        return {"component": self.component, "treated": self.treated.as_api(),
                "control": self.control.as_api() if self.control else None,
                "did_pts": self.did_pts, "did_ci95_pts": as_pair(self.did_ci95_pts),
                "verdict": self.verdict, "verdict_reason": self.verdict_reason,
                "inconclusive": self.inconclusive.as_api() if self.inconclusive else None}


@dataclass(frozen=True)
class AdjustedChange:
    """One group's adjusted ETT% change and its interval."""

    change_pts: float | None
    ci95_pts: tuple[float, float] | None

    def as_api(self) -> dict[str, Any]:
        return {"change_pts": self.change_pts, "ci95_pts": as_pair(self.ci95_pts)}


@dataclass(frozen=True)
class AdjustedEffect:
    """ETT_SPEC §6.2: the variance-reduced ETT% change (``ADJUSTED_METHOD``), beside §6's."""

    method: str
    treated: AdjustedChange
    control: AdjustedChange | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    verdict: Verdict
    verdict_reason: str
    jobs_used: int
    jobs_left_out: int
    strata: int
    inconclusive: Inconclusive | None

    @property
    def deciding_pts(self) -> float | None:
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    @property
    def deciding_ci95_pts(self) -> tuple[float, float] | None:
        return self.did_ci95_pts if self.did_ci95_pts is not None else self.treated.ci95_pts

    def as_api(self) -> dict[str, Any]:
        return {"method": self.method, "treated": self.treated.as_api(),
                "control": self.control.as_api() if self.control else None,
                "did_pts": self.did_pts, "did_ci95_pts": as_pair(self.did_ci95_pts),
                "verdict": self.verdict, "verdict_reason": self.verdict_reason,
                "jobs_used": self.jobs_used, "jobs_left_out": self.jobs_left_out,
                "strata": self.strata,
                "inconclusive": self.inconclusive.as_api() if self.inconclusive else None}


@dataclass(frozen=True)
class Overlap:
    """Another rollout to the same component, scopes overlapping, inside a window (§6.4)."""

    id: int
    name: str
    at: datetime

    def as_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "at": iso_utc(self.at)}


@dataclass(frozen=True)
class TrendDay:
    """One UTC day's ETT% of the treated and of the control jobs (None: no rows that day)."""

    day: date
    treated_ett_pct: float | None
    control_ett_pct: float | None


@dataclass(frozen=True)
class RolloutInfo:
    id: int
    name: str
    component: str
    at: datetime
    scope: Scope
    notes: str
    link: str
    simulated: bool

    def as_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "component": self.component,
                "at": iso_utc(self.at), "scope": self.scope.as_dict()}


@dataclass(frozen=True)
class ImpactResult:
    """Every §6 field, plus the verdict, the per-job distributions and (optionally) the trend."""

    rollout: RolloutInfo
    window_days: int
    windows: Windows
    treated: GroupImpact
    control: GroupImpact | None
    did_pts: float | None
    did_ci95_pts: tuple[float, float] | None
    components: dict[str, ComponentShift]
    treated_before_ett: list[float]
    treated_after_ett: list[float]
    verdict: Verdict
    verdict_reason: str
    component_effect: ComponentEffect
    adjusted: AdjustedEffect
    overlapping: list[Overlap] = field(default_factory=list)
    inconclusive: Inconclusive | None = None
    trend: list[TrendDay] = field(default_factory=list)

    @property
    def has_jobs(self) -> bool:
        """Whether any treated job has a row in either window (else the page says so)."""
        return self.treated.jobs_before + self.treated.jobs_after > 0

    def moved_components(self, limit: int = 8) -> list[ComponentShift]:
        """Components whose lost share moved the most (either way), largest first."""
        moved = [c for c in self.components.values() if c.change_pts]
        return sorted(moved, key=lambda c: -abs(c.change_pts or 0.0))[:limit]

    @property
    def deciding_pts(self) -> float | None:
        """The unadjusted change the §6 verdict reads (the DiD's when it has an interval)."""
        return self.did_pts if self.did_ci95_pts is not None else self.treated.change_pts

    def as_api(self) -> dict[str, Any]:
        """The JSON of ETT_SPEC §6 (percentages not rounded), plus the verdict, §6.1's
        ``component_effect``, §6.2's ``adjusted``, §6.4's ``overlapping`` and, for an
        inconclusive verdict, what it would take."""
        w = self.windows
        return {
            "rollout": self.rollout.as_api(), "window_days": self.window_days,
            "before": [w.before[0].isoformat(), w.before[1].isoformat()],
            "after": [w.after[0].isoformat(), w.after[1].isoformat()] if w.after else None,
            "partial": w.partial, "treated": self.treated.as_api(),
            "control": self.control.as_api() if self.control else None,
            "did_pts": self.did_pts,
            "did_ci95_pts": list(self.did_ci95_pts) if self.did_ci95_pts else None,
            "components": {name: shift.as_api() for name, shift in self.components.items()},
            "verdict": self.verdict, "verdict_reason": self.verdict_reason,
            "inconclusive": self.inconclusive.as_api() if self.inconclusive else None,
            "component_effect": self.component_effect.as_api(),
            "adjusted": self.adjusted.as_api(),
            "overlapping": [overlap.as_api() for overlap in self.overlapping],
        }


# --------------------------------------------------------------------------- windows

def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def last_data_day() -> date | None:
    """The last UTC day holding any per-day row: where an ``after`` window is cut."""
    day: date | None = DailyCategoryRollup.objects.aggregate(last=Max("day"))["last"]
    return day


def rollout_windows(at: datetime, window_days: int, last_day: date | None) -> Windows:
    """§6's windows around ``at``; ``after`` cut at ``last_day`` (then ``partial``)."""
    day = utc_day(at)
    before = (day - timedelta(days=window_days), day - timedelta(days=1))
    after_start, after_end = day + timedelta(days=1), day + timedelta(days=window_days)
    if last_day is None or last_day < after_start:
        return Windows(day, before, None, partial=True)
    if last_day < after_end:
        return Windows(day, before, (after_start, last_day), partial=True)
    return Windows(day, before, (after_start, after_end), partial=False)


# --------------------------------------------------------------------------- reading rollups

@dataclass
class _Jobs:
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


def per_job_ett(group: Group, *, after: bool) -> list[float]:
    """Each job's own ETT% in one window (jobs with wall time there)."""
    present, col = (group.in_after, 2) if after else (group.in_before, 0)
    rows = group.values[present]
    return [100.0 * p / w for w, p in zip(rows[:, col], rows[:, col + 1], strict=True)
            if w > 0]


def _window_filter(windows: Windows) -> tuple[str, list[Any]]:
    """SQL condition on ``d.day`` for both windows, and its parameters."""
    sql, params = "(d.day BETWEEN %s AND %s)", [windows.before[0], windows.before[1]]
    if windows.after is not None:
        sql = f"({sql} OR d.day BETWEEN %s AND %s)"
        params += [windows.after[0], windows.after[1]]
    return sql, params


@dataclass
class _WindowRead:
    """What one scan of the windows' day rows gives: the per-job sums (the bootstrap's
    input), the treated jobs' lost GPU-s per category in each window (key: after?), and the
    per-day treated and control sums of the trend (when asked)."""

    jobs: _Jobs
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


def _read_windows(windows: Windows, scope: Scope, component: str, *,
                  with_trend: bool) -> _WindowRead:
    """The windows' per-job sums and per-day trend (one scan of the job-day sums, grouped
    two ways at once with GROUPING SETS), each job's lost time of ``component`` per window,
    and the treated jobs' lost time per category.

    Why job-days: each job's wall and productive GPU-s per window is all the bootstrap
    needs, and the job-day sums hold it in one row per job and day where the category rows
    hold ~9 (two 90-day windows of the bench's fleet: 49,295 rows instead of 439,841). The read
    runs without parallel workers: two of them on a two-core server only compete with the
    request, and a split scan adds a job's rows in a different order on every run (the
    draws' digest reads the sums to 9 significant digits, see :func:`_significant`, so
    that costs no bootstrap, but the page's numbers should not flicker). Jobs are sorted
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
    trend = [TrendDay(d, _ratio(v[1], v[0]), _ratio(v[3], v[2])) for d, v in sorted(sums.items())]
    return _WindowRead(_jobs_of(per_job, own, gpus), lost, trend)


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
             own: Mapping[tuple[str, bool], float], gpus: Mapping[str, int]) -> _Jobs:
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
    return _Jobs(list(index), values, present[:, 0], present[:, 1],
                 np.array([gpus.get(job, 1) for job in index], dtype=np.int64),
                 np.array(scoped, dtype=bool))


# --------------------------------------------------------------------------- arithmetic

def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0.0 else 100.0 * part / whole


def _impact(group: Group, draws: np.ndarray | None) -> GroupImpact:
    """A group's numbers, its interval from its bootstrap draws (None: too few jobs)."""
    totals = group.totals
    before, after = _ratio(totals[1], totals[0]), _ratio(totals[3], totals[2])
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = after / before - 1.0 if before else None
    return GroupImpact(group.jobs_before, group.jobs_after, before, after, change, relative,
                       interval(None if draws is None else draws[:, 0]))


def _lost_share(group: Group, draws: np.ndarray | None) -> LostShare:
    totals = group.totals
    return LostShare(_ratio(totals[4], totals[0]), _ratio(totals[5], totals[2]),
                     interval(None if draws is None else draws[:, 1]))


@dataclass(frozen=True)
class Draws:
    """One impact's bootstrap draws: the treated and control groups' (B, 2) ETT% and
    component changes (§6, §6.1) and the adjusted estimate's (B, 3) (§6.2); None where a
    group has too few jobs."""

    treated: np.ndarray | None
    control: np.ndarray | None
    adjusted: np.ndarray | None


@dataclass(frozen=True)
class _Kept:
    """Draws this process holds, and whether :class:`BootstrapDraws` holds them too."""

    draws: Draws
    stored: bool


#: Bootstrap draws already computed, by their inputs (see :func:`group_draws`).
_DRAWS: OrderedDict[str, _Kept] = OrderedDict()
_DRAWS_KEPT: Final = 256
_DRAWS_LOCK = threading.Lock()
#: Part of every digest: a new layout of the stored draws never reads an old one.
_DRAWS_LAYOUT: Final = b"draws-v2"


#: Significant digits of the per-job sums a digest tells apart (see :func:`_significant`).
DIGEST_DIGITS: Final = 9


def _significant(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` to ``DIGEST_DIGITS`` significant digits, exactly: (mantissa, exponent)
    integer arrays with value ~= mantissa x 10^exponent.

    Why: Postgres adds a job's rows in whatever order its plan meets them, and a plan can
    change (another join, new statistics; seen when the treated jobs moved to a temporary
    table), so the same rollups can give sums a last bit apart: they differ in the 16th
    digit, the digest keeps 9, and a changed rollup moves a sum far more than that.
    """
    magnitude = np.abs(values)
    exponent = np.zeros(values.shape, dtype=np.int64)
    nonzero = magnitude > 0
    exponent[nonzero] = np.floor(np.log10(magnitude[nonzero])).astype(np.int64) - (
        DIGEST_DIGITS - 1)
    mantissa = np.rint(values / np.power(10.0, exponent)).astype(np.int64)
    return mantissa, exponent


def _digest(group: Group | None) -> bytes | None:
    if group is None:
        return None
    h = hashlib.blake2b(digest_size=16)
    for array in (*_significant(group.values), group.in_before, group.in_after, group.gpus):
        h.update(np.ascontiguousarray(array).tobytes())
        h.update(b"|")
    return h.digest()


def _draws_key(seed: int, treated: Group, control: Group | None) -> str:
    """The digest the draws of these inputs are kept under (process memory and table)."""
    h = hashlib.blake2b(digest_size=32)
    h.update(_DRAWS_LAYOUT)
    h.update(str(seed).encode())
    h.update(_digest(treated) or b"")
    h.update(_digest(control) or b"-")
    return h.hexdigest()


def _as_array(cell: bytes | memoryview | None, width: int) -> np.ndarray | None:
    if cell is None:
        return None
    return np.frombuffer(bytes(cell), dtype=np.float64).reshape(-1, width)


def _as_cell(draws: np.ndarray | None) -> bytes | None:
    return None if draws is None else np.ascontiguousarray(draws, dtype=np.float64).tobytes()


#: A stored row read after this long since it was marked used is marked again (one write a
#: day at most, so the warm pass's pruning keeps whatever is still read).
_MARK_USED_AFTER: Final = timedelta(days=1)


def _stored_draws(key: str) -> tuple[Draws, datetime] | None:
    """The draws stored under ``key`` and when they were last marked used."""
    row = (BootstrapDraws.objects.filter(key=key)
           .values_list("treated", "control", "adjusted", "used_at").first())
    if row is None:
        return None
    return Draws(_as_array(row[0], 2), _as_array(row[1], 2), _as_array(row[2], 3)), row[3]


def _store_draws(key: str, draws: Draws) -> None:
    """Keep ``draws`` under ``key``; a concurrent worker storing the same key wins, harmlessly
    (both computed the same draws from the same seed and inputs)."""
    BootstrapDraws.objects.bulk_create(
        [BootstrapDraws(key=key, treated=_as_cell(draws.treated),
                        control=_as_cell(draws.control), adjusted=_as_cell(draws.adjusted),
                        used_at=datetime.now(UTC))], ignore_conflicts=True)


def _remember(key: str, kept: _Kept) -> None:
    with _DRAWS_LOCK:
        _DRAWS[key] = kept
        _DRAWS.move_to_end(key)
        while len(_DRAWS) > _DRAWS_KEPT:
            _DRAWS.popitem(last=False)


def compute_draws(seed: int, treated: Group, control: Group | None) -> Draws:
    """The impact's draws (:func:`estimators.impact_draws`)."""
    return Draws(*estimators.impact_draws(seed, treated, control))


def group_draws(seed: int, treated: Group, control: Group | None, *,
                keep: bool = False) -> tuple[Draws, bool]:
    """The impact's draws (:func:`compute_draws`) for these groups, and whether they still
    need keeping: not stored yet, or stored but not marked used for a day.

    The draws are a pure function of the seed and the two groups' per-job sums, so they are
    kept by a digest of exactly those: in this process (the last 256) and in
    :class:`BootstrapDraws` for every process. A page, the API, the component page and the
    weekly report asking for the same rollout over unchanged rollups reuse one bootstrap,
    while any changed sum, job or window gives a new digest and a new bootstrap. The rollups
    are still read on every call; only the arithmetic is shared.

    Only ``keep`` (the worker: the warm pass, or a warm a page asked for) stores draws and
    marks them used. A read computes missing draws in memory and leaves the keeping to the
    worker, because a GET never writes; the numbers are the same either way.
    """
    key = _draws_key(seed, treated, control)
    with _DRAWS_LOCK:
        kept = _DRAWS.get(key)
        if kept is not None:
            _DRAWS.move_to_end(key)
    if kept is not None and kept.stored:
        return kept.draws, False
    found = _stored_draws(key)
    if found is not None:
        draws, used_at = found
        unmarked = used_at < datetime.now(UTC) - _MARK_USED_AFTER
        if unmarked and keep:
            BootstrapDraws.objects.filter(key=key).update(used_at=datetime.now(UTC))
        _remember(key, _Kept(draws, stored=True))
        return draws, unmarked and not keep
    draws = kept.draws if kept is not None else compute_draws(seed, treated, control)
    if keep:
        _store_draws(key, draws)
    _remember(key, _Kept(draws, stored=keep))
    return draws, not keep


def _deciding(did_ci: tuple[float, float] | None, treated_ci: tuple[float, float] | None,
              has_control: bool, treated: GroupImpact) -> tuple[tuple[float, float], str] | str:
    """The interval a verdict reads and its name, or the reason there is none."""
    if did_ci is not None:
        return did_ci, "difference-in-differences interval"
    if treated_ci is not None:
        what = "treated change interval"
        if has_control:
            what += " (the control has too few jobs for a DiD interval)"
        return treated_ci, what
    return (f"too few jobs: {treated.jobs_before} treated before, {treated.jobs_after} after "
            f"(an interval needs {MIN_JOBS_FOR_INTERVAL} in each window)")


_WORDS: Final[dict[str, dict[estimators.Direction, str]]] = {
    "ett": {"above": "improved", "below": "regressed", "contains": "inconclusive"},
    "lost": {"above": "increased", "below": "reduced", "contains": "inconclusive"},
}


def _decide(found: tuple[tuple[float, float], str] | str, words: str) -> tuple[str, str]:
    """A verdict from the deciding interval (ETT_SPEC §6.1's rule), and why."""
    if isinstance(found, str):
        return "inconclusive", found
    (low, high), what = found
    span = f"[{low:+.2f}, {high:+.2f}] pts"
    side = estimators.direction((low, high))
    place = {"above": "lies above 0", "below": "lies below 0", "contains": "contains 0"}[side]
    return _WORDS[words][side], f"the {what} {span} {place}"


def _verdict(treated: GroupImpact, control: GroupImpact | None,
             did_ci: tuple[float, float] | None) -> tuple[Verdict, str]:
    """improved / regressed / inconclusive from the deciding interval, and why."""
    verdict, reason = _decide(_deciding(did_ci, treated.ci95_pts, control is not None,
                                        treated), "ett")
    return verdict, reason  # type: ignore[return-value]


def _difference(treated: np.ndarray | None, control: np.ndarray | None) -> np.ndarray | None:
    """Draw by draw, treated - control (the DiD's draws); None unless both exist."""
    return None if treated is None or control is None else treated - control


def _detectability(draws: np.ndarray | None, estimate: float | None,
                   windows: Windows, window_days: int) -> Detectability | None:
    """What it takes, from the deciding draws; the window that holds the least data (a
    partial ``after``) is the one that limits the estimate."""
    if draws is None or estimate is None:
        return None
    days = min(window_days, windows.after_days) or 1
    return estimators.detectability(draws, estimate, days)


def _inconclusive(verdict: str, draws: np.ndarray | None, estimate: float | None,
                  windows: Windows, window_days: int) -> Inconclusive | None:
    if verdict != "inconclusive":
        return None
    days = min(window_days, windows.after_days) or 1
    return Inconclusive.of(_detectability(draws, estimate, windows, window_days), days)


def _component_effect(component: str, treated: Group, control: Group | None, draws: Draws,
                      treated_impact: GroupImpact, windows: Windows,
                      window_days: int) -> ComponentEffect:
    """ETT_SPEC §6.1 from the §6 draws' second column."""
    t_share = _lost_share(treated, draws.treated)
    c_share = None if control is None else _lost_share(control, draws.control)
    did = did_ci = None
    did_draws = _difference(draws.treated, draws.control)
    if c_share is not None and t_share.change_pts is not None \
            and c_share.change_pts is not None:
        did = t_share.change_pts - c_share.change_pts
    if did_draws is not None:
        did_ci = interval(did_draws[:, 1])
    verdict, reason = _decide(_deciding(did_ci, t_share.ci95_pts, control is not None,
                                        treated_impact), "lost")
    deciding = did_draws if did_ci is not None else draws.treated
    estimate = did if did_ci is not None else t_share.change_pts
    return ComponentEffect(
        component, t_share, c_share, did, did_ci, verdict, reason,  # type: ignore[arg-type]
        _inconclusive(verdict, None if deciding is None else deciding[:, 1], estimate,
                      windows, window_days))


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _adjusted(treated: Group, control: Group | None, draws: Draws,
              treated_impact: GroupImpact, windows: Windows,
              window_days: int) -> AdjustedEffect:
    """ETT_SPEC §6.2: the size-stratified change (``estimators``), its intervals and verdict.
    With a control too small for an interval, the treated change alone decides (as in §6)."""
    use_control = control if control is not None and draws.control is not None else None
    strata = Stratified.of(treated, use_control)
    point = estimators.adjusted_point(strata)
    adjusted = draws.adjusted
    columns = [None if adjusted is None else adjusted[:, k] for k in range(3)]
    t = AdjustedChange(_finite(point[0]), interval(columns[0]))
    c = did = did_ci = None
    if use_control is not None:
        c = AdjustedChange(_finite(point[1]), interval(columns[1]))
        did, did_ci = _finite(point[2]), interval(columns[2])
    elif control is not None:
        c = AdjustedChange(None, None)
    verdict, reason = _decide(_deciding(did_ci, t.ci95_pts, control is not None,
                                        treated_impact), "ett")
    deciding, estimate = (columns[2], did) if did_ci is not None else (columns[0],
                                                                        t.change_pts)
    dropped = 0 if use_control is None or strata.control is None else (
        len(use_control.values) - len(strata.control.values))
    left_out = dropped + estimators.left_out(strata) if treated.values.size else 0
    total = len(treated.values) + (0 if use_control is None else len(use_control.values))
    return AdjustedEffect(
        ADJUSTED_METHOD, t, c, did, did_ci, verdict, reason,  # type: ignore[arg-type]
        jobs_used=total - left_out, jobs_left_out=left_out, strata=strata.count,
        inconclusive=_inconclusive(verdict, deciding, estimate, windows, window_days))


def _components(lost: Mapping[bool, Mapping[str, float]], wall_before: float,
                wall_after: float) -> dict[str, ComponentShift]:
    """Every component's lost share (points of wall time) before and after, sorted by name."""
    mapping = phase_components()
    grouped: dict[bool, dict[str, float]] = {False: defaultdict(float), True: defaultdict(float)}
    for after, categories in lost.items():
        for category, gpu_s in categories.items():
            grouped[after][component_of(category, mapping)] += gpu_s
    names = set(known_components()) | set(grouped[False]) | set(grouped[True])
    return {name: ComponentShift(name, _ratio(grouped[False].get(name, 0.0), wall_before),
                                 _ratio(grouped[True].get(name, 0.0), wall_after))
            for name in sorted(names)}


# --------------------------------------------------------------------------- overlaps

def _labels_meet(a: Scope, b: Scope) -> bool:
    """Whether two scopes' label lists leave a job both could hold (a field both name must
    share a value)."""
    for name in ("models", "teams", "clusters"):
        left, right = getattr(a, name), getattr(b, name)
        if left is not None and right is not None and not set(left) & set(right):
            return False
    return True


def scopes_overlap(a: Scope, b: Scope) -> bool:
    """Whether some job is in both scopes. Label lists decide alone; with a job pattern,
    the jobs ETT knows decide (two globs' overlap is not worth guessing)."""
    if not _labels_meet(a, b):
        return False
    if a.job_pattern is None and b.job_pattern is None:
        return True
    lists = dict(a.label_lists())
    for label, values in b.label_lists():
        lists[label] = tuple(set(values) & set(lists[label])) if label in lists else values
    rows = JobRollup.objects.filter(**{f"{label}__in": list(values)
                                       for label, values in lists.items()})
    return any(a.matches(*row) and b.matches(*row)
               for row in rows.values_list("job", "model", "team", "cluster").iterator())


def _overlapping(info: RolloutInfo, windows: Windows, window_days: int) -> list[Overlap]:
    """ETT_SPEC §6.4: other rollouts to the same component, scopes overlapping, whose
    moment falls inside either window (the whole ``after`` window, data or not; the
    rollout's own day is in neither)."""
    first, last = windows.before[0], windows.rollout_day + timedelta(days=window_days)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    others = (Rollout.objects.filter(component=info.component, at__gte=start, at__lt=end)
              .exclude(pk=info.id).order_by("at", "id"))
    return [Overlap(other.pk, other.name, other.at) for other in others
            if utc_day(other.at) != windows.rollout_day
            and scopes_overlap(info.scope, other.parsed_scope)]


# --------------------------------------------------------------------------- runner

def _info(rollout: Rollout) -> RolloutInfo:
    return RolloutInfo(id=rollout.pk, name=rollout.name, component=rollout.component,
                       at=rollout.at, scope=rollout.parsed_scope, notes=rollout.notes,
                       link=rollout.link, simulated=rollout.simulated)


class ImpactQueryRunner:
    """Runs an :class:`ImpactQuery`; ``calculate()`` is None for an unknown rollout.

    ``keep``: store the bootstrap draws (the worker's warm pass). Without it, draws found
    missing are computed in memory and the worker is asked to keep them
    (``ett.warm_rollout_impact`` for this rollout and window)."""

    def __init__(self, query: ImpactQuery, *, keep: bool = False) -> None:
        self.query = query
        self.keep = keep

    def calculate(self) -> ImpactResult | None:
        rollout = Rollout.objects.filter(pk=self.query.rollout_id).first()
        if rollout is None:
            return None
        info = _info(rollout)
        window_days = self.query.window_days
        windows = rollout_windows(info.at, window_days, last_data_day())
        read = _read_windows(windows, info.scope, info.component,
                             with_trend=self.query.with_trend)
        jobs = read.jobs
        in_scope = jobs.group(jobs.in_scope)
        out_of_scope = None if info.scope.is_fleet else jobs.group(~jobs.in_scope)
        draws, unkept = group_draws(info.id, in_scope, out_of_scope, keep=self.keep)
        if unkept:
            send_once(WARM_TASK, [info.id, window_days], within_s=ASK_AGAIN_S)
        treated = _impact(in_scope, draws.treated)
        control, did, did_ci = None, None, None
        did_draws = _difference(draws.treated, draws.control)
        if out_of_scope is not None:
            control = _impact(out_of_scope, draws.control)
            if treated.change_pts is not None and control.change_pts is not None:
                did = treated.change_pts - control.change_pts
            if did_draws is not None:
                did_ci = interval(did_draws[:, 0])
        totals = in_scope.totals
        verdict, reason = _verdict(treated, control, did_ci)
        deciding = did_draws if did_ci is not None else draws.treated
        return ImpactResult(
            rollout=info, window_days=window_days, windows=windows,
            treated=treated, control=control, did_pts=did, did_ci95_pts=did_ci,
            components=_components(read.lost, totals[0], totals[2]),
            treated_before_ett=per_job_ett(in_scope, after=False),
            treated_after_ett=per_job_ett(in_scope, after=True), verdict=verdict,
            verdict_reason=reason,
            component_effect=_component_effect(info.component, in_scope, out_of_scope, draws,
                                               treated, windows, window_days),
            adjusted=_adjusted(in_scope, out_of_scope, draws, treated, windows, window_days),
            overlapping=_overlapping(info, windows, window_days),
            inconclusive=_inconclusive(verdict, None if deciding is None else deciding[:, 0],
                                       did if did_ci is not None else treated.change_pts,
                                       windows, window_days),
            trend=read.trend,
        )
