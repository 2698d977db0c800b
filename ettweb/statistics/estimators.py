"""The arithmetic of a rollout's impact (ETT_SPEC §6, §6.1, §6.2): pure numpy, no Django.

Both the impact query (``ettweb.queries.impact``, fed from the rollups) and the calibration
benchmark (``bench.calibration``, fed from the simulator through the engine) call these
functions, so the estimator held to its false-positive rate, power and coverage is the one
the pages show. That is why it lives here, below the apps, and not in the query package:
importing anything under ``ettweb.queries`` loads the whole query layer and Django, which
the calibration, run without a database or settings, must not need.

A group (treated or control) is one row per job of six sums over its day rows in each
window (:data:`COLUMNS`): wall and productive GPU-seconds, and the rollout's component's
lost GPU-seconds, before and after. Everything is a ratio of sums over those rows.

* **§6 and §6.1 (unadjusted).** The percentile bootstrap over jobs: a draw takes the group's
  jobs with replacement, each job with all its rows, and recomputes both the ETT% change and
  the component's lost-share change from the same resampled jobs — so the two intervals are
  read from one set of draws, as §6.1 asks.
* **§6.2 (adjusted): post-stratified by job size.** The jobs are cut into strata of similar
  GPU count (powers of two, merged until each stratum holds enough jobs of every group in
  every window); the change is measured within each stratum and the strata are weighted by
  the treated jobs' GPU-seconds in them; the interval comes from a bootstrap that resamples
  jobs within their stratum. Why: a fleet's ETT% is dominated by its few largest jobs, which
  also fail most; a plain bootstrap lets a draw hold three 2,048-GPU jobs or none, and a
  difference in differences against a control made of other sizes compares unlike jobs.
  Holding each size's weight at the treated jobs' own removes both, and the estimand stays
  the treated jobs' ETT% change. Assumptions and limits:
  ``docs/explanation/rollout-statistics.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

#: The six per-job sums of a group, in this column order.
COLUMNS: Final = ("wall_before", "productive_before", "wall_after", "productive_after",
                  "lost_before", "lost_after")
WALL_B, PROD_B, WALL_A, PROD_A, LOST_B, LOST_A = range(6)
BOOTSTRAP_DRAWS: Final = 2000
#: A group needs this many jobs in each window for an interval (ETT_SPEC §6).
MIN_JOBS_FOR_INTERVAL: Final = 5
#: Draws counted per matrix product: bounds memory at (chunk x jobs) counts.
DRAWS_PER_CHUNK: Final = 200
#: A stratum of the adjusted estimate holds at least this many jobs of each group in each
#: window; smaller ones merge into their neighbour of the next size.
MIN_JOBS_PER_STRATUM: Final = 5
#: z for a two-sided 95% interval, and for 80% power: the minimum detectable effect is
#: (1.96 + 0.84) standard errors.
Z95: Final = 1.959964
Z80: Final = 0.841621
Direction = Literal["above", "below", "contains"]


@dataclass(frozen=True)
class Group:
    """Treated or control jobs: one row per job (``COLUMNS``), whether it has rows in each
    window, and its GPU count (the adjusted estimate's strata)."""

    values: np.ndarray
    in_before: np.ndarray
    in_after: np.ndarray
    gpus: np.ndarray

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

    @property
    def totals(self) -> np.ndarray:
        return self.values.sum(axis=0)

    def take(self, mask: np.ndarray) -> Group:
        return Group(self.values[mask], self.in_before[mask], self.in_after[mask],
                     self.gpus[mask])


# --------------------------------------------------------------------------- changes

def ett_change(sums: np.ndarray) -> np.ndarray:
    """ETT% after - before, in points, of sums (..., 6); NaN where a window has no wall."""
    return _share_change(sums, PROD_B, PROD_A)


def lost_change(sums: np.ndarray) -> np.ndarray:
    """The component's lost share after - before, in points of wall time (ETT_SPEC §6)."""
    return _share_change(sums, LOST_B, LOST_A)


def _share_change(sums: np.ndarray, before: int, after: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(sums[..., WALL_B] > 0, 100.0 * sums[..., before] / sums[..., WALL_B],
                     np.nan)
        a = np.where(sums[..., WALL_A] > 0, 100.0 * sums[..., after] / sums[..., WALL_A],
                     np.nan)
    return np.asarray(a - b)


def ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0.0 else 100.0 * part / whole


# --------------------------------------------------------------------------- §6 bootstrap

def _counts(rng: np.random.Generator, jobs: int, count: int) -> np.ndarray:
    """How often each of ``count`` draws picked each of ``jobs`` jobs: (count, jobs)."""
    picks = rng.integers(0, jobs, size=(count, jobs))
    picks += np.arange(count)[:, None] * jobs
    return np.bincount(picks.ravel(), minlength=count * jobs).reshape(count, jobs)


def bootstrap(values: np.ndarray, rng: np.random.Generator,
              draws: int = BOOTSTRAP_DRAWS) -> np.ndarray:
    """``draws`` resamplings of a group's jobs (ETT_SPEC §6): (draws, 2) of the ETT% change
    and the component's lost-share change, each row from one draw's jobs; NaN where a
    window holds no wall time.

    A draw's counts of each job times the (jobs, 6) sums is one matrix product, cheaper
    than gathering (draws, jobs, 6) values and summing them.
    """
    out = np.empty((draws, 2))
    for start in range(0, draws, DRAWS_PER_CHUNK):
        count = min(DRAWS_PER_CHUNK, draws - start)
        sums = _counts(rng, len(values), count) @ values
        out[start:start + count, 0] = ett_change(sums)
        out[start:start + count, 1] = lost_change(sums)
    return out


def interval(draws: np.ndarray | None) -> tuple[float, float] | None:
    """The 2.5th and 97.5th percentiles of the finite draws (None: none)."""
    if draws is None:
        return None
    finite = draws[np.isfinite(draws)]
    if not len(finite):
        return None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def direction(bounds: tuple[float, float]) -> Direction:
    """Where an interval lies against 0: the verdicts' one rule (ETT_SPEC §6.1)."""
    if bounds[0] > 0:
        return "above"
    if bounds[1] < 0:
        return "below"
    return "contains"


# --------------------------------------------------------------------------- §6.2 adjusted

def size_class(gpus: np.ndarray) -> np.ndarray:
    """Powers of two: 1, 2-3, 4-7, ... GPUs (jobs of a class start, fail and restart alike)."""
    return np.floor(np.log2(np.maximum(gpus, 1))).astype(np.int64)


def strata(treated: Group, control: Group | None) -> dict[int, int]:
    """Size class → stratum, over the treated jobs' classes: merged, smallest upwards, until
    each stratum holds ``MIN_JOBS_PER_STRATUM`` jobs of every group in each window; a short
    remainder at the top joins the stratum below it. A control job of a size no treated job
    has is in no stratum: it would weigh nothing, and only add its noise to the strata it
    was merged into (a pilot team's control holding a few 2,048-GPU jobs)."""
    groups = [treated] + ([control] if control is not None else [])
    classes = sorted(set(size_class(treated.gpus).tolist()))
    sized = [(g, size_class(g.gpus)) for g in groups]
    mapping: dict[int, int] = {}
    pending: list[int] = []
    tally = [[0, 0] for _ in groups]
    stratum = 0
    for c in classes:
        pending.append(c)
        for k, (g, cls) in enumerate(sized):
            tally[k][0] += int((cls == c)[g.in_before].sum())
            tally[k][1] += int((cls == c)[g.in_after].sum())
        if min(min(pair) for pair in tally) >= MIN_JOBS_PER_STRATUM:
            mapping.update({p: stratum for p in pending})
            pending, tally, stratum = [], [[0, 0] for _ in groups], stratum + 1
    last = max(stratum - 1, 0)
    mapping.update({p: last for p in pending})
    return mapping


@dataclass(frozen=True)
class Stratified:
    """The adjusted estimate's inputs: each group's jobs with their stratum."""

    treated: Group
    control: Group | None
    treated_stratum: np.ndarray
    control_stratum: np.ndarray | None
    count: int

    @classmethod
    def of(cls, treated: Group, control: Group | None) -> Stratified:
        mapping = strata(treated, control)

        def label(group: Group) -> np.ndarray:
            return np.array([mapping.get(c, -1) for c in size_class(group.gpus).tolist()],
                            dtype=np.int64)

        if control is not None:
            control = control.take(label(control) >= 0)
        return cls(treated, control, label(treated),
                   None if control is None else label(control),
                   max(len(set(mapping.values())), 1))


def _stratum_sums(values: np.ndarray, labels: np.ndarray, count: int,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """(strata, 6) sums, or (draws, strata, 6) when ``weights`` is (draws, jobs)."""
    spread_out = np.zeros((len(labels), count, values.shape[1]))
    spread_out[np.arange(len(labels)), labels] = values  # each job's sums in its stratum
    flat = spread_out.reshape(len(labels), count * values.shape[1])
    if weights is None:
        return np.asarray(flat.sum(axis=0).reshape(count, values.shape[1]))
    return np.asarray((weights @ flat).reshape(len(weights), count, values.shape[1]))


def _combine(treated: np.ndarray, control: np.ndarray | None) -> np.ndarray:
    """(..., 3): the treated change, the control change and their difference, each the
    strata's changes weighted by the treated jobs' GPU-seconds in them; a stratum where a
    group lacks wall time in a window counts for none."""
    t_change = ett_change(treated)
    weight = treated[..., WALL_B] + treated[..., WALL_A]
    usable = np.isfinite(t_change)
    c_change = None
    if control is not None:
        c_change = ett_change(control)
        usable &= np.isfinite(c_change)
    weight = np.where(usable, weight, 0.0)
    total = weight.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(usable, t_change, 0.0)
        t_mean = (weight * t).sum(axis=-1) / total
        if c_change is None:
            c_mean = np.full_like(t_mean, np.nan)
        else:
            c_mean = (weight * np.where(usable, c_change, 0.0)).sum(axis=-1) / total
    return np.stack([t_mean, c_mean, t_mean - c_mean], axis=-1)


def adjusted_point(s: Stratified) -> np.ndarray:
    """(treated change, control change, DiD) of the post-stratified estimate."""
    control = None if s.control is None else _stratum_sums(
        s.control.values, s.control_stratum, s.count)  # type: ignore[arg-type]
    return _combine(_stratum_sums(s.treated.values, s.treated_stratum, s.count), control)


def _stratified_counts(rng: np.random.Generator, labels: np.ndarray,
                       count: int) -> np.ndarray:
    """(count, jobs): each draw takes, within every stratum, as many jobs as it holds."""
    counts = np.zeros((count, len(labels)))
    for stratum in np.unique(labels):
        members = np.flatnonzero(labels == stratum)
        counts[:, members] = _counts(rng, len(members), count)
    return counts


def adjusted_draws(s: Stratified, rng: np.random.Generator,
                   draws: int = BOOTSTRAP_DRAWS) -> np.ndarray:
    """(draws, 3) of the adjusted estimate: each draw resamples jobs within their stratum
    (treated, then control, independently)."""
    out = np.empty((draws, 3))
    for start in range(0, draws, DRAWS_PER_CHUNK):
        count = min(DRAWS_PER_CHUNK, draws - start)
        treated = _stratum_sums(s.treated.values, s.treated_stratum, s.count,
                                _stratified_counts(rng, s.treated_stratum, count))
        control = None
        if s.control is not None and s.control_stratum is not None:
            control = _stratum_sums(s.control.values, s.control_stratum, s.count,
                                    _stratified_counts(rng, s.control_stratum, count))
        out[start:start + count] = _combine(treated, control)
    return out


def left_out(s: Stratified) -> int:
    """Treated jobs in strata that count for nothing (a group without wall time in one of
    the windows there), plus, with a control, control jobs in such strata."""
    point_t = _stratum_sums(s.treated.values, s.treated_stratum, s.count)
    usable = np.isfinite(ett_change(point_t))
    if s.control is not None and s.control_stratum is not None:
        usable &= np.isfinite(ett_change(_stratum_sums(s.control.values, s.control_stratum,
                                                       s.count)))
        return int((~usable[s.treated_stratum]).sum() + (~usable[s.control_stratum]).sum())
    return int((~usable[s.treated_stratum]).sum())


# --------------------------------------------------------------------------- one impact

def impact_draws(seed: int, treated: Group, control: Group | None,
                 draws: int = BOOTSTRAP_DRAWS) -> tuple[np.ndarray | None, np.ndarray | None,
                                                         np.ndarray | None]:
    """All of an impact's draws from one generator seeded with ``seed`` (the rollout's id,
    ETT_SPEC §6): the treated group's (B, 2) first, then the control's, then the adjusted
    estimate's (B, 3), so §6's draws are the same whether or not the others are taken. A
    group with too few jobs has none; the adjusted estimate drops a control without draws.
    """
    rng = np.random.default_rng(seed)
    treated_draws = bootstrap(treated.values, rng, draws) if treated.enough_jobs else None
    control_draws = bootstrap(control.values, rng, draws) \
        if control is not None and control.enough_jobs else None
    adjusted = None
    if treated_draws is not None:
        strata = Stratified.of(treated, control if control_draws is not None else None)
        adjusted = adjusted_draws(strata, rng, draws)
    return treated_draws, control_draws, adjusted


# --------------------------------------------------------------------------- what it takes

@dataclass(frozen=True)
class Detectability:
    """For an inconclusive verdict: the smallest change the window can detect (80% power,
    95% interval), and how many days each window would need to detect the current one."""

    mde_pts: float
    days_needed: int | None  # None: the estimate is 0, no window detects it

    def more_days(self, window_days: int) -> int | None:
        return None if self.days_needed is None else max(0, self.days_needed - window_days)


def detectability(draws: np.ndarray, estimate: float, window_days: int) -> Detectability | None:
    """From the deciding estimate's draws: the standard error is their spread; it shrinks
    as 1 / sqrt(days) (jobs arrive at a steady rate, so a window of twice the days holds
    twice the jobs), and an interval excludes 0 once |estimate| > 1.96 standard errors.
    The days are those that make the estimate's own size that large."""
    finite = draws[np.isfinite(draws)]
    if len(finite) < 2:
        return None
    se = float(np.std(finite, ddof=1))
    mde = (Z95 + Z80) * se
    if not estimate or se <= 0.0:
        return Detectability(mde, None)
    needed = window_days * (Z95 * se / abs(estimate)) ** 2
    return Detectability(mde, max(window_days, math.ceil(needed)))


def as_pair(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [bounds[0], bounds[1]]


def percent_change(after: float | None, before: float | None) -> float | None:
    """after / before - 1 (None from a missing or zero ``before``)."""
    if before is None or after is None or not before:
        return None
    return after / before - 1.0

