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
from django.db import connection
from django.db.models import Max

from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.components.logic import known_components
from ettweb.queries.base import aggregating, phase_components
from ettweb.rollouts.logic import iso_utc
from ettweb.rollouts.models import BootstrapDraws, Rollout
from ettweb.rollouts.scope import Scope
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
)

DEFAULT_WINDOW_DAYS: Final = 14
MIN_WINDOW_DAYS: Final = 1
MAX_WINDOW_DAYS: Final = 90
BOOTSTRAP_DRAWS: Final = 2000
#: A group needs this many jobs in each window for an interval (ETT_SPEC §6).
MIN_JOBS_FOR_INTERVAL: Final = 5
#: Draws counted per matrix product: bounds memory at (chunk x jobs x 4) floats.
DRAWS_PER_CHUNK: Final = 200
Verdict = Literal["improved", "regressed", "inconclusive"]
VERDICTS: Final[tuple[Verdict, ...]] = ("improved", "regressed", "inconclusive")


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
    trend: list[TrendDay] = field(default_factory=list)

    @property
    def has_jobs(self) -> bool:
        """Whether any treated job has a row in either window (else the page says so)."""
        return self.treated.jobs_before + self.treated.jobs_after > 0

    def moved_components(self, limit: int = 8) -> list[ComponentShift]:
        """Components whose lost share moved the most (either way), largest first."""
        moved = [c for c in self.components.values() if c.change_pts]
        return sorted(moved, key=lambda c: -abs(c.change_pts or 0.0))[:limit]

    def as_api(self) -> dict[str, Any]:
        """The JSON of ETT_SPEC §6 (percentages not rounded), plus ``verdict``."""
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
    """Per job (sorted by id): wall and productive GPU-s in each window, in-scope flag."""

    ids: list[str]
    values: np.ndarray  # shape (jobs, 4): wall_before, productive_before, wall_after, prod_after
    in_before: np.ndarray  # bool: the job has a row in the before window
    in_after: np.ndarray
    in_scope: np.ndarray

    def group(self, mask: np.ndarray) -> _Group:
        return _Group(self.values[mask], self.in_before[mask], self.in_after[mask])


@dataclass
class _Group:
    """The treated or the control jobs' rows of :class:`_Jobs`."""

    values: np.ndarray
    in_before: np.ndarray
    in_after: np.ndarray

    @property
    def totals(self) -> np.ndarray:
        """Σ over the group's jobs of the four sums (zeros for no job)."""
        return self.values.sum(axis=0)

    @property
    def jobs_before(self) -> int:
        return int(self.in_before.sum())

    @property
    def jobs_after(self) -> int:
        return int(self.in_after.sum())

    @property
    def enough_jobs(self) -> bool:
        """Enough jobs in each window for an interval (ETT_SPEC §6)."""
        return min(self.jobs_before, self.jobs_after) >= MIN_JOBS_FOR_INTERVAL

    def per_job_ett(self, after: bool) -> list[float]:
        """Each job's own ETT% in one window (jobs with wall time there)."""
        present, col = (self.in_after, 2) if after else (self.in_before, 0)
        rows = self.values[present]
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


#: Temporary table the treated jobs are copied into for one impact's reads (dropped at
#: commit): sending thousands of job ids as an array parameter cost more to quote than the
#: read itself, and Postgres plans a join against an analyzed table better.
_TREATED_TABLE = "impact_treated_jobs"


def _load_treated(cursor: Any, treated: list[str]) -> None:
    cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_TREATED_TABLE} (job text PRIMARY KEY) "
                   f"ON COMMIT DROP")
    cursor.execute(f"TRUNCATE {_TREATED_TABLE}")  # a savepoint's commit drops nothing
    raw = connection.connection
    assert raw is not None  # aggregating() holds the connection
    with raw.cursor() as copy_cursor, copy_cursor.copy(
            f"COPY {_TREATED_TABLE} (job) FROM STDIN") as copy:
        for job in treated:
            copy.write_row((job,))
    cursor.execute(f"ANALYZE {_TREATED_TABLE}")


def _read_windows(windows: Windows, scope: Scope, *, with_trend: bool) -> _WindowRead:
    """The windows' per-job sums and per-day trend (one scan of the job-day sums, grouped
    two ways at once with GROUPING SETS), and the treated jobs' lost time per category.

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
    join = "" if treated is None else f" LEFT JOIN {_TREATED_TABLE} AS t ON t.job = d.job"
    sets = ["(job, after, in_scope)"] + (["(day, in_scope)"] if with_trend else [])
    day = "day" if with_trend else "NULL::date"  # a column outside every set may not show
    sql = (f"SELECT GROUPING(job), job, {day}, after, in_scope, SUM(wall), SUM(productive) "
           f"FROM (SELECT d.job, d.day, d.wall_gpu_seconds AS wall, "
           f"d.productive_gpu_seconds AS productive, d.day > %s AS after, "
           f"{in_scope} AS in_scope FROM {JobDayRollup._meta.db_table} d{join} "
           f"WHERE {where}) AS x GROUP BY GROUPING SETS ({', '.join(sets)})")
    args: list[Any] = [windows.rollout_day, *params]
    with aggregating() as cursor:
        cursor.execute("SELECT set_config('max_parallel_workers_per_gather', '0', true)")
        if treated is not None:
            _load_treated(cursor, treated)
        cursor.execute(sql, args)
        rows = cursor.fetchall()
        lost = _treated_lost(cursor, windows, scope, treated)
    per_job = sorted((job, bool(late), bool(scoped), float(wall), float(productive))
                     for no_job, job, _, late, scoped, wall, productive in rows if not no_job)
    sums: dict[date, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for no_job, _, day_, _, scoped, wall, productive in rows:
        if no_job:  # the per-day set
            offset = 0 if scoped else 2
            sums[day_][offset] += float(wall)
            sums[day_][offset + 1] += float(productive)
    trend = [TrendDay(d, _ratio(v[1], v[0]), _ratio(v[3], v[2])) for d, v in sorted(sums.items())]
    return _WindowRead(_jobs_of(per_job), lost, trend)


def _treated_lost(cursor: Any, windows: Windows, scope: Scope,
                  treated: list[str] | None) -> dict[bool, dict[str, float]]:
    """The treated jobs' lost GPU-s per category in each window (key: after?).

    From the sums that hold exactly those jobs: the fleet's day sums for a fleet-wide
    rollout; the label sums of the scope's models, teams and clusters for a scope of labels
    alone (a scope matches a job's rollup labels exactly, as the label sums are kept); the
    treated jobs' own day rows (the table :func:`_load_treated` filled) when the scope names
    a job pattern.
    """
    where, params = _window_filter(windows)
    lists = scope.label_lists() if treated is not None and scope.job_pattern is None else []
    labels = "".join(f" AND d.{label} = ANY(%s)" for label, _ in lists)
    label_params = [list(values) for _, values in lists]
    if treated is None:
        source = FleetDayRollup._meta.db_table + " d"
    elif scope.job_pattern is None:
        source = LabelDayRollup._meta.db_table + " d"
    else:
        source = (f"{DailyCategoryRollup._meta.db_table} d "
                  f"JOIN {_TREATED_TABLE} AS t ON t.job = d.job")
    cursor.execute(f"SELECT d.day > %s, d.category, SUM(d.gpu_seconds) FROM {source} "
                   f"WHERE {where} AND d.category <> %s{labels} GROUP BY 1, 2",
                   [windows.rollout_day, *params, PRODUCTIVE, *label_params])
    lost: dict[bool, dict[str, float]] = {False: {}, True: {}}
    for late, category, gpu_s in cursor.fetchall():
        lost[bool(late)][category] = float(gpu_s)
    return lost


def _jobs_of(per_job: Sequence[tuple[str, bool, bool, float, float]]) -> _Jobs:
    """(job, after?, in scope?, wall, productive) rows, sorted by job, as arrays."""
    index: dict[str, int] = {}
    scoped: list[bool] = []
    for job, _, in_scope, _, _ in per_job:
        if job not in index:
            index[job] = len(index)
            scoped.append(in_scope)
    values = np.zeros((len(index), 4))
    present = np.zeros((len(index), 2), dtype=bool)
    for job, after, _, wall, productive in per_job:
        i, col = index[job], 2 if after else 0
        values[i, col], values[i, col + 1] = wall, productive
        present[i, 1 if after else 0] = True
    return _Jobs(list(index), values, present[:, 0], present[:, 1],
                 np.array(scoped, dtype=bool))


# --------------------------------------------------------------------------- arithmetic

def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0.0 else 100.0 * part / whole


def _impact(group: _Group, draws: np.ndarray | None) -> GroupImpact:
    """A group's numbers, its interval from its bootstrap draws (None: too few jobs)."""
    totals = group.totals
    before, after = _ratio(totals[1], totals[0]), _ratio(totals[3], totals[2])
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = after / before - 1.0 if before else None
    return GroupImpact(group.jobs_before, group.jobs_after, before, after, change, relative,
                       _interval(draws))


#: Bootstrap draws already computed, by their inputs (see :func:`group_draws`).
_DRAWS: OrderedDict[str, tuple[np.ndarray | None, np.ndarray | None]] = OrderedDict()
_DRAWS_KEPT: Final = 256
_DRAWS_LOCK = threading.Lock()


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


def _digest(group: _Group | None) -> bytes | None:
    if group is None:
        return None
    h = hashlib.blake2b(digest_size=16)
    for array in (*_significant(group.values), group.in_before, group.in_after):
        h.update(np.ascontiguousarray(array).tobytes())
        h.update(b"|")
    return h.digest()


def _draws_key(seed: int, treated: _Group, control: _Group | None) -> str:
    """The digest the draws of these inputs are kept under (process memory and table)."""
    h = hashlib.blake2b(digest_size=32)
    h.update(str(seed).encode())
    h.update(_digest(treated) or b"")
    h.update(_digest(control) or b"-")
    return h.hexdigest()


def _as_array(cell: bytes | memoryview | None) -> np.ndarray | None:
    return None if cell is None else np.frombuffer(bytes(cell), dtype=np.float64)


def _as_cell(draws: np.ndarray | None) -> bytes | None:
    return None if draws is None else np.ascontiguousarray(draws, dtype=np.float64).tobytes()


#: A stored row read after this long since it was marked used is marked again (one write a
#: day at most, so the warm pass's pruning keeps whatever is still read).
_MARK_USED_AFTER: Final = timedelta(days=1)


def _stored_draws(key: str) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    row = (BootstrapDraws.objects.filter(key=key)
           .values_list("treated", "control", "used_at").first())
    if row is None:
        return None
    now = datetime.now(UTC)
    if row[2] < now - _MARK_USED_AFTER:
        BootstrapDraws.objects.filter(key=key).update(used_at=now)
    return _as_array(row[0]), _as_array(row[1])


def _store_draws(key: str, draws: tuple[np.ndarray | None, np.ndarray | None]) -> None:
    """Keep ``draws`` under ``key``; a concurrent request storing the same key wins, harmlessly
    (both computed the same draws from the same seed and inputs)."""
    BootstrapDraws.objects.bulk_create(
        [BootstrapDraws(key=key, treated=_as_cell(draws[0]), control=_as_cell(draws[1]),
                        used_at=datetime.now(UTC))], ignore_conflicts=True)


def group_draws(seed: int, treated: _Group,
                control: _Group | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The treated and control groups' bootstrap draws: one generator seeded with ``seed``
    (the rollout's id, ETT_SPEC §6), the treated group's draws first, then the control's;
    None for a group with too few jobs.

    The draws are a pure function of the seed and the two groups' per-job sums, so they are
    kept by a digest of exactly those: in this process (the last 256) and in
    :class:`BootstrapDraws` for every process. A page, the API, the component page and the
    weekly report asking for the same rollout over unchanged rollups reuse one bootstrap,
    while any changed sum, job or window gives a new digest and a new bootstrap. The rollups
    are still read on every call; only the arithmetic is shared.
    """
    key = _draws_key(seed, treated, control)
    with _DRAWS_LOCK:
        kept = _DRAWS.get(key)
        if kept is not None:
            _DRAWS.move_to_end(key)
            return kept
    found = _stored_draws(key)
    if found is None:
        rng = np.random.default_rng(seed)  # same rollout, same draws, same interval
        found = (bootstrap_changes(treated.values, rng) if treated.enough_jobs else None,
                 bootstrap_changes(control.values, rng)
                 if control is not None and control.enough_jobs else None)
        _store_draws(key, found)
    with _DRAWS_LOCK:
        _DRAWS[key] = found
        while len(_DRAWS) > _DRAWS_KEPT:
            _DRAWS.popitem(last=False)
    return found


def bootstrap_changes(values: np.ndarray, rng: np.random.Generator,
                      draws: int = BOOTSTRAP_DRAWS) -> np.ndarray:
    """``draws`` resampled changes in points: jobs drawn with replacement, each job bringing
    all four of its sums; a draw whose window holds no wall time is NaN."""
    jobs = len(values)
    changes = np.empty(draws)
    for start in range(0, draws, DRAWS_PER_CHUNK):
        count = min(DRAWS_PER_CHUNK, draws - start)
        picks = rng.integers(0, jobs, size=(count, jobs))
        # How often each draw picked each job, then one matrix product: (count, jobs) @
        # (jobs, 4). Cheaper than gathering (count, jobs, 4) values and summing them.
        picks += np.arange(count)[:, None] * jobs
        times = np.bincount(picks.ravel(), minlength=count * jobs).reshape(count, jobs)
        sums = times @ values  # (count, 4)
        with np.errstate(divide="ignore", invalid="ignore"):
            before = np.where(sums[:, 0] > 0, 100.0 * sums[:, 1] / sums[:, 0], np.nan)
            after = np.where(sums[:, 2] > 0, 100.0 * sums[:, 3] / sums[:, 2], np.nan)
        changes[start:start + count] = after - before
    return changes


def _interval(draws: np.ndarray | None) -> tuple[float, float] | None:
    """The 2.5th and 97.5th percentiles of the finite draws."""
    if draws is None:
        return None
    finite = draws[np.isfinite(draws)]
    if not len(finite):
        return None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def _verdict(treated: GroupImpact, control: GroupImpact | None,
             did_ci: tuple[float, float] | None) -> tuple[Verdict, str]:
    """improved / regressed / inconclusive from the deciding interval, and why."""
    if did_ci is not None:
        interval, what = did_ci, "difference-in-differences interval"
    elif treated.ci95_pts is not None:
        interval, what = treated.ci95_pts, "treated change interval"
        if control is not None:
            what += " (the control has too few jobs for a DiD interval)"
    else:
        return "inconclusive", (f"too few jobs: {treated.jobs_before} treated before, "
                                f"{treated.jobs_after} after (an interval needs "
                                f"{MIN_JOBS_FOR_INTERVAL} in each window)")
    low, high = interval
    span = f"[{low:+.2f}, {high:+.2f}] pts"
    if low > 0:
        return "improved", f"the {what} {span} lies above 0"
    if high < 0:
        return "regressed", f"the {what} {span} lies below 0"
    return "inconclusive", f"the {what} {span} contains 0"


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


# --------------------------------------------------------------------------- runner

def _info(rollout: Rollout) -> RolloutInfo:
    return RolloutInfo(id=rollout.pk, name=rollout.name, component=rollout.component,
                       at=rollout.at, scope=rollout.parsed_scope, notes=rollout.notes,
                       link=rollout.link, simulated=rollout.simulated)


class ImpactQueryRunner:
    """Runs an :class:`ImpactQuery`; ``calculate()`` is None for an unknown rollout."""

    def __init__(self, query: ImpactQuery) -> None:
        self.query = query

    def calculate(self) -> ImpactResult | None:
        rollout = Rollout.objects.filter(pk=self.query.rollout_id).first()
        if rollout is None:
            return None
        info = _info(rollout)
        windows = rollout_windows(info.at, self.query.window_days, last_data_day())
        read = _read_windows(windows, info.scope, with_trend=self.query.with_trend)
        jobs = read.jobs
        in_scope = jobs.group(jobs.in_scope)
        out_of_scope = None if info.scope.is_fleet else jobs.group(~jobs.in_scope)
        treated_draws, control_draws = group_draws(info.id, in_scope, out_of_scope)
        treated = _impact(in_scope, treated_draws)
        control, did, did_ci = None, None, None
        if out_of_scope is not None:
            control = _impact(out_of_scope, control_draws)
            if treated.change_pts is not None and control.change_pts is not None:
                did = treated.change_pts - control.change_pts
            if treated_draws is not None and control_draws is not None:
                did_ci = _interval(treated_draws - control_draws)
        totals = in_scope.totals
        verdict, reason = _verdict(treated, control, did_ci)
        return ImpactResult(
            rollout=info, window_days=self.query.window_days, windows=windows,
            treated=treated, control=control, did_pts=did, did_ci95_pts=did_ci,
            components=_components(read.lost, totals[0], totals[2]),
            treated_before_ett=in_scope.per_job_ett(after=False),
            treated_after_ett=in_scope.per_job_ett(after=True), verdict=verdict,
            verdict_reason=reason,
            trend=read.trend,
        )
