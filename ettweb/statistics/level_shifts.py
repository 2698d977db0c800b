"""Level shifts in one daily series: where a component's lost share moved and stayed moved.

Pure numpy, no Django: the beat task runs it over the stored rollups (``ettweb.changes.detection``)
and the calibration benchmark over simulated fleets, so both measure the same code.

ETT_SPEC §6.3 leaves the method to the project. This one, in six steps
(docs/explanation/rollout-statistics.md, "Unrecorded changes", tells the same in words):

1. **Scale.** Detection runs on the square root of the share. Why: a share's daily noise
   grows with the share (a component losing 4% wobbles by a point, one losing 0.3% by
   hundredths), and after the root it is about even, so one penalty fits both sides of a
   step — the fleet's recovery rollout takes reliability from 2.4% (sd 0.5) to 0.2% (sd
   0.03), a step a penalty sized for the noise before it would not pay for.
2. **Noise.** Its sd from a robust variogram (:func:`noise_sd`): medians of the differences
   between days 5 to 9 apart, which a step or an outlier day spoils only a few of. Outlier
   days (a crash loop, a day half reported) are set to the median of the week around them
   (a Hampel filter): a level shift survives that, a blip of up to three days does not.
3. **Segmentation.** Optimal partitioning (Jackson et al. 2005: the exact search that PELT
   prunes; at a year of days there is nothing worth pruning) with the L2 cost, every segment
   at least :data:`MIN_SEGMENT_DAYS` long, and :data:`PENALTY` x the noise variance x its
   inflation per change — ruptures' ``Pelt(model="l2", jump=1)`` with a penalty chosen on
   series that hold no change (:func:`null_series`, :func:`false_shifts`).
4. **Days are not independent.** Jobs run for days, so a day's share is much like the day
   before's (lag-1 autocorrelation up to 0.6 in the simulated fleet), and n days tell less
   than n independent ones: a week of a few long jobs looks like a level. A first, lighter
   segmentation's residuals give the lag-1 autocorrelation rho; the final segmentation's
   penalty and the test below use AR(1)'s variance inflation (1 + rho) / (1 - rho).
5. **Confirmation.** Each change must move the level by :data:`MIN_SHIFT_PTS` or more and
   pass Welch's t-test between the segments either side at :data:`ALPHA`, each side's days
   counting as n / inflation samples (Sentry's trend detector also confirms a breakpoint
   with a t-test); the weakest failing change goes (its neighbours merge) until all pass.
   Two opposite changes under :data:`BLIP_DAYS` apart that come back to the first level
   are a blip, not a level, and both go.
6. **The day.** Each change is put on the day that best splits its two segments, then
   moved back over days that have already gone :data:`ONSET_SHARE` of the way (a rollout
   reaches jobs as they start, so its first day or two are part-way): ``index`` is the
   first day that shows the new level.

Days without data (NaN) are skipped, never filled: a shift across a gap starts on the first
day with data after it. The levels reported are the plain means of each side's days, in
points of wall time, as the charts draw them (outlier days are replaced for the search only).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

#: Penalty per change, in noise variances (after the inflation of step 4). Swept on null series
#: (docs/benchmarks.md, "Change detection"): at 25, 600 synthetic flat series of 90 days (sd 0.2-0.6
#: pts, 2% outlier days, day-to-day autocorrelation 0-0.5) showed at most one change each, and the
#: simulated A/A fleet (180 days, 20,000 jobs, 55 component-team series, two seeds) none.
PENALTY: Final = 25.0
#: A level must hold this many days to count: three keeps two rollouts three days apart
#: apart, and a change shows up three days after it began at the earliest.
MIN_SEGMENT_DAYS: Final = 3
#: Smallest move reported, in points of wall time. ETT_SPEC §6.3 promises steps of 1 point;
#: half of that leaves room for the noise in the two levels without reporting hundredths.
MIN_SHIFT_PTS: Final = 0.5
#: Welch's test level the two sides of a change must differ at: with a few dozen series a
#: day (every component, for the fleet and each team), a false alarm is 1 in 1,000 tests.
ALPHA: Final = 1e-3
#: Two opposite changes closer than this many days that end within MIN_SHIFT_PTS of where
#: they began are a blip (a week of a few unusual jobs), not a level shift. The price: a
#: change rolled back within two weeks is not listed either.
BLIP_DAYS: Final = 14
#: The change's day moves back over days already this share of the way to the new level
#: and twice the noise's sd past the old one, at most MAX_ONSET_DAYS of them.
ONSET_SHARE: Final = 1.0 / 3.0
ONSET_SIGMAS: Final = 2.0
MAX_ONSET_DAYS: Final = 2
#: The lags (days) where the variogram gives the noise's sd: past the days one job spans.
FAR_LAGS: Final = range(5, 10)
#: Largest day-to-day autocorrelation believed (an inflation of 9).
MAX_RHO: Final = 0.8
#: Floor of the noise's sd on the square-root scale (0.04 points at a 1% share): a series
#: as flat as a component that loses nothing never makes hundredths significant.
MIN_SIGMA: Final = 0.02
#: Hampel filter: days each side of a day, and how many noise sds from their median make
#: it an outlier.
HAMPEL_HALF_WIDTH: Final = 3
OUTLIER_SIGMAS: Final = 3.5
#: MAD x this estimates the sd of normal noise.
MAD_TO_SD: Final = 1.4826


@dataclass(frozen=True)
class Shift:
    """One level shift: ``index`` is the position (in the series given) of the first day at
    the new level; ``before_pct`` and ``after_pct`` are the means of the segments either
    side, in points."""

    index: int
    before_pct: float
    after_pct: float

    @property
    def change_pts(self) -> float:
        return self.after_pct - self.before_pct


def find_shifts(values: np.ndarray, *, penalty: float = PENALTY,
                min_days: int = MIN_SEGMENT_DAYS, min_shift_pts: float = MIN_SHIFT_PTS,
                alpha: float = ALPHA) -> list[Shift]:
    """The level shifts of ``values`` (a daily lost share in points, NaN = no data that
    day), in order of day. The keywords are for the calibration's sweeps; the beat task
    uses the module's constants."""
    series = np.asarray(values, dtype=np.float64)
    days = np.flatnonzero(np.isfinite(series))
    if len(days) < 2 * min_days:
        return []
    root = np.sqrt(np.maximum(series[days], 0.0))
    sigma = noise_sd(root)
    root = despike(root, sigma)
    variance = penalty * sigma * sigma
    inflation = variance_inflation(root, _segment(root, variance, min_days))
    cuts = _segment(root, variance * inflation, min_days)
    level = root * root  # the outlier days replaced, back in points
    cuts = _confirmed(level, cuts, min_shift_pts, alpha, inflation)
    cuts = _without_blips(level, cuts, min_shift_pts)
    cuts = _onsets(level, _refined(level, cuts, min_days), noise_sd(level))
    bounds, raw = [0, *cuts, len(level)], series[days]
    return [Shift(index=int(days[cut]), before_pct=float(raw[bounds[k]:cut].mean()),
                  after_pct=float(raw[cut:bounds[k + 2]].mean()))
            for k, cut in enumerate(cuts)]


# --------------------------------------------------------------------------- noise

def noise_sd(values: np.ndarray) -> float:
    """The daily noise's sd: the variogram gamma(k) = var(x[t + k] - x[t]) / 2 is the
    noise's variance once k is past the autocorrelated days, and each variance taken as
    (1.4826 x MAD)^2 ignores the few differences a step or an outlier spoils. The median over
    :data:`FAR_LAGS` (shorter ones in a short series), at least :data:`MIN_SIGMA`."""
    usable = [lag for lag in FAR_LAGS if lag <= len(values) // 3]
    lags = usable or [max(1, len(values) // 3)]
    if len(values) <= lags[0]:
        return MIN_SIGMA
    gamma = [_robust_variance(values[lag:] - values[:-lag]) / 2.0 for lag in lags]
    return max(MIN_SIGMA, math.sqrt(float(np.median(gamma))))


def _robust_variance(values: np.ndarray) -> float:
    mad = float(np.median(np.abs(values - np.median(values))))
    return (MAD_TO_SD * mad) ** 2


def despike(values: np.ndarray, sigma: float, half_width: int = HAMPEL_HALF_WIDTH,
            limit: float = OUTLIER_SIGMAS) -> np.ndarray:
    """``values`` with each day further than ``limit`` sds from the median of the days
    around it (``half_width`` each side, fewer at the ends) set to that median."""
    padded = np.pad(values, half_width, constant_values=np.nan)
    middle = np.nanmedian(sliding_window_view(padded, 2 * half_width + 1), axis=1)
    return np.where(np.abs(values - middle) > limit * sigma, middle, values)


def variance_inflation(values: np.ndarray, cuts: list[int]) -> float:
    """AR(1)'s long-run variance factor (1 + rho) / (1 - rho), rho being the lag-1
    autocorrelation of ``values`` less their segment means (0 to :data:`MAX_RHO`)."""
    residuals = values.copy()
    bounds = [0, *cuts, len(values)]
    for low, high in itertools.pairwise(bounds):
        residuals[low:high] -= values[low:high].mean()
    total = float(residuals @ residuals)
    rho = float(residuals[1:] @ residuals[:-1]) / total if total > 0.0 else 0.0
    rho = min(MAX_RHO, max(0.0, rho))
    return (1.0 + rho) / (1.0 - rho)


# --------------------------------------------------------------------------- segmentation

def _segment(values: np.ndarray, beta: float, min_days: int) -> list[int]:
    """Optimal partitioning, L2 cost, ``beta`` per change: where segments start."""
    n = len(values)
    s1 = np.concatenate(([0.0], np.cumsum(values)))
    s2 = np.concatenate(([0.0], np.cumsum(values * values)))
    best = np.full(n + 1, np.inf)
    best[0] = -beta
    last = np.zeros(n + 1, dtype=np.int64)
    for end in range(min_days, n + 1):
        starts = np.arange(0, end - min_days + 1)
        starts = starts[np.isfinite(best[starts])]
        sums = s1[end] - s1[starts]
        total = best[starts] + (s2[end] - s2[starts]) - sums * sums / (end - starts) + beta
        pick = int(np.argmin(total))
        best[end], last[end] = total[pick], starts[pick]
    cuts, end = [], n
    while (end := int(last[end])) > 0:
        cuts.append(end)
    return cuts[::-1]


def _confirmed(values: np.ndarray, cuts: list[int], min_shift_pts: float, alpha: float,
               inflation: float) -> list[int]:
    """``cuts`` less the changes too small or not significant (step 5), weakest first."""
    cuts = list(cuts)
    while cuts:
        bounds = [0, *cuts, len(values)]
        failing = []
        for k in range(len(cuts)):
            shift, p = welch(values[bounds[k]:bounds[k + 1]],
                             values[bounds[k + 1]:bounds[k + 2]], inflation)
            if abs(shift) < min_shift_pts or p >= alpha:
                failing.append((p, -abs(shift), k))
        if not failing:
            break
        cuts.pop(max(failing)[2])
    return cuts


def _without_blips(values: np.ndarray, cuts: list[int], min_shift_pts: float) -> list[int]:
    """``cuts`` less every pair of opposite changes under :data:`BLIP_DAYS` apart that
    comes back to within ``min_shift_pts`` of where it began."""
    cuts, k = list(cuts), 0
    while k + 1 < len(cuts):
        bounds = [0, *cuts, len(values)]
        before, during, after = (values[bounds[k + j]:bounds[k + j + 1]].mean()
                                 for j in range(3))
        if (cuts[k + 1] - cuts[k] < BLIP_DAYS and (during - before) * (after - during) < 0
                and abs(after - before) < min_shift_pts):
            del cuts[k:k + 2]
            k = max(0, k - 1)
        else:
            k += 1
    return cuts


def _refined(values: np.ndarray, cuts: list[int], min_days: int) -> list[int]:
    """Each change moved to the day that best splits the two segments around it (dropping
    a change can leave its neighbour where the two used to share the work)."""
    cuts = list(cuts)
    for k in range(len(cuts)):
        low = cuts[k - 1] if k else 0
        high = cuts[k + 1] if k + 1 < len(cuts) else len(values)
        part = values[low:high]
        splits = range(min_days, len(part) - min_days + 1)
        if len(splits):
            costs = [_sse(part[:split]) + _sse(part[split:]) for split in splits]
            cuts[k] = low + splits[int(np.argmin(costs))]
    return cuts


def _onsets(values: np.ndarray, cuts: list[int], sigma: float) -> list[int]:
    """Each change moved back over the days before it that have already gone
    :data:`ONSET_SHARE` of the way to the new level and :data:`ONSET_SIGMAS` sds past the
    old one, at most :data:`MAX_ONSET_DAYS` of them (step 6)."""
    cuts = list(cuts)
    for k, cut in enumerate(cuts):
        low = cuts[k - 1] if k else 0
        high = cuts[k + 1] if k + 1 < len(cuts) else len(values)
        before, after = float(values[low:cut].mean()), float(values[cut:high].mean())
        need = max(ONSET_SIGMAS * sigma, ONSET_SHARE * abs(after - before))
        direction = 1.0 if after > before else -1.0
        moved = 0
        while (moved < MAX_ONSET_DAYS and cut - moved - 1 > low
               and (values[cut - moved - 1] - before) * direction >= need):
            moved += 1
        cuts[k] = cut - moved
    return cuts


def _sse(values: np.ndarray) -> float:
    return float(((values - values.mean()) ** 2).sum())


# --------------------------------------------------------------------------- the test

def welch(before: np.ndarray, after: np.ndarray,
          inflation: float = 1.0) -> tuple[float, float]:
    """(after's mean - before's, two-sided p of Welch's t-test), each side's days counting
    as n / ``inflation`` samples. Two flat sides at different levels are as significant as
    it gets (p 0), at one level not at all (p 1)."""
    shift = float(after.mean() - before.mean())
    sides = [(float(side.var(ddof=1)) if len(side) > 1 else 0.0, len(side) / inflation)
             for side in (before, after)]
    variance = sum(var / n for var, n in sides)
    if variance <= 0.0:
        return shift, 0.0 if shift else 1.0
    df = variance * variance / sum((var / n) ** 2 / max(n - 1.0, 1.0) for var, n in sides)
    return shift, student_t_two_sided(shift / math.sqrt(variance), df)


def student_t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: the regularized
    incomplete beta function I_x(df / 2, 1 / 2) at x = df / (df + t^2)."""
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), by its continued fraction (Numerical Recipes' ``betai``; Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return result


# --------------------------------------------------------------------------- calibration

def null_series(rng: np.random.Generator, days: int, sd_pts: float, *, level_pts: float = 3.0,
                rho: float = 0.0, outlier_share: float = 0.02,
                outlier_sds: float = 6.0) -> np.ndarray:
    """A flat series with noise like a real daily lost share's: normal noise of sd
    ``sd_pts`` around ``level_pts``, each day correlated ``rho`` with the day before (AR(1):
    jobs span days), and ``outlier_share`` of the days pushed ``outlier_sds`` sds up (a
    crash loop) or half that down (a day half reported). Never below 0."""
    noise = rng.normal(0.0, sd_pts, days)
    for day in range(1, days):
        noise[day] = rho * noise[day - 1] + math.sqrt(1.0 - rho * rho) * noise[day]
    outliers = rng.random(days) < outlier_share
    noise[outliers] += outlier_sds * sd_pts * rng.choice((-0.5, 1.0), int(outliers.sum()))
    return np.maximum(0.0, level_pts + noise)


def false_shifts(series: Iterable[np.ndarray], *, penalty: float = PENALTY) -> list[int]:
    """How many shifts :func:`find_shifts` reports in each of ``series``, which hold none
    (:func:`null_series`, or an A/A fleet's lost shares): what the penalty is swept on."""
    return [len(find_shifts(values, penalty=penalty)) for values in series]
