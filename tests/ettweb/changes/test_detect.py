"""The level-shift detector (``ettweb.statistics.level_shifts``) on synthetic daily lost shares.

No database: ETT_SPEC §6.3's two promises on series whose truth is known — a planted step of
1 point or more found within 1 day of its day, and at most one change per 90 days of a flat
series — with noise like real daily lost shares (sd 0.2-0.6 points, days correlated with
the day before, outlier days), and what the method does with gaps, outliers, blips and a
step that lands over two days. Seeds are fixed, so every run sees the same series.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ettweb.statistics.level_shifts import (
    PENALTY,
    Shift,
    false_shifts,
    find_shifts,
    null_series,
    student_t_two_sided,
    welch,
)

DAYS = 90
SIZES = (1.0, -1.0, 1.25, -1.5, 2.0, 4.0)
POSITIONS = range(10, 81, 5)


def _stepped(seed: int, position: int, size: float, sd: float, *, outliers: float = 0.0,
             rho: float = 0.2, level: float = 3.0, days: int = DAYS) -> np.ndarray:
    rng = np.random.default_rng([seed, position, round(100 * size) + 500, round(10 * sd)])
    values = null_series(rng, days, sd, level_pts=level, rho=rho, outlier_share=outliers)
    values[position:] = np.maximum(0.0, values[position:] + size)
    return values


@pytest.mark.slow
def test_every_step_of_a_point_or_more_is_found_within_a_day() -> None:
    """Six sizes from 1 to 4 points, up and down, at every fifth day from 10 to 80 of 90, in
    noise of sd 0.2 points: exactly one change each, within a day of the step, its size
    right to 0.6 points."""
    misses = []
    for size in SIZES:
        for position in POSITIONS:
            for seed in range(3):
                found = find_shifts(_stepped(seed, position, size, 0.2))
                if not (len(found) == 1 and abs(found[0].index - position) <= 1
                        and abs(found[0].change_pts - size) < 0.6):
                    misses.append((size, position, seed,
                                   [(s.index, round(s.change_pts, 2)) for s in found]))
    assert misses == []


@pytest.mark.parametrize(("sd", "outliers", "sizes"), [
    (0.3, 0.0, (1.0, -1.0, 1.5, -2.0)),
    (0.25, 0.02, (1.0, -1.0, 1.5, -2.0)),
    (0.6, 0.02, (2.5, -2.5, 4.0))])
@pytest.mark.slow
def test_in_more_noise_nearly_every_step_is_found_within_a_day(
        sd: float, outliers: float, sizes: tuple[float, ...]) -> None:
    """Where a day's noise is a third of the step, or an outlier day (6 sds up, 3 down) can
    fall next to it, the noise alone puts a few steps two days off, so the bar is a rate:
    95% within a day, and never more than one other change."""
    within = total = 0
    for size in sizes:
        for position in POSITIONS:
            for seed in range(3):
                found = find_shifts(_stepped(seed, position, size, sd, outliers=outliers,
                                             level=3.0 + 2 * sd))
                total += 1
                within += any(abs(s.index - position) <= 1 for s in found)
                assert len(found) <= 2, (size, position, seed)
    assert within / total >= 0.95, f"{within} of {total}"


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5])
@pytest.mark.slow
def test_flat_noisy_series_show_at_most_one_change_per_90_days(rho: float) -> None:
    """Nothing changes: sd 0.2, 0.4 and 0.6 points, 2% outlier days, each day correlated
    ``rho`` with the day before (jobs span days), 40 seeds each."""
    series = [null_series(np.random.default_rng([seed, round(10 * sd), round(10 * rho)]),
                          DAYS, sd, rho=rho)
              for sd in (0.2, 0.4, 0.6) for seed in range(40)]
    counts = false_shifts(series)
    assert max(counts) <= 1
    assert sum(counts) <= 0.02 * len(counts)


def test_a_flat_year_never_shows_two_changes_within_90_days() -> None:
    for seed in range(12):
        values = null_series(np.random.default_rng([seed, 365]), 365, 0.5, rho=0.3)
        days = [s.index for s in find_shifts(values)]
        assert all(b - a >= 90 for a, b in itertools.pairwise(days)), days


def test_the_penalty_is_what_keeps_noise_out() -> None:
    """The calibration sweeps the penalty on null series: far below the chosen one, noise
    that correlates day to day starts to read as levels."""
    series = [null_series(np.random.default_rng([seed, 77]), DAYS, 0.6, rho=0.5)
              for seed in range(30)]
    assert sum(false_shifts(series)) == 0
    assert sum(false_shifts(series, penalty=PENALTY / 25)) > 0


def test_days_without_data_are_skipped_and_the_index_is_the_series_own() -> None:
    values = _stepped(1, 50, 1.5, 0.2)
    values[::7] = np.nan  # no job on Sundays
    found = find_shifts(values)
    assert len(found) == 1 and abs(found[0].index - 50) <= 1
    assert math.isfinite(values[found[0].index])


def test_a_step_inside_a_gap_starts_on_the_first_day_with_data_after_it() -> None:
    values = _stepped(2, 42, -2.0, 0.2)
    values[38:45] = np.nan
    assert [s.index for s in find_shifts(values)] == [45]


def test_too_few_days_or_none_is_no_change() -> None:
    assert find_shifts(np.full(DAYS, np.nan)) == []
    assert find_shifts(np.array([1.0, 1.0, 5.0, 5.0, 5.0])) == []
    assert find_shifts(np.array([], dtype=float)) == []
    assert find_shifts(np.zeros(DAYS)) == []  # a component that loses nothing


def test_outlier_days_and_blips_are_no_level() -> None:
    values = null_series(np.random.default_rng(5), DAYS, 0.3, outlier_share=0.0)
    spiky = values.copy()
    spiky[[20, 21, 55, 70]] += 6.0  # a crash loop for two days, two bad days
    assert find_shifts(spiky) == []
    blip = values.copy()
    blip[40:46] += 2.0  # a week of a few unusual jobs, then back
    assert find_shifts(blip) == []


def test_a_step_to_almost_nothing_is_found_though_the_noise_shrinks_with_it() -> None:
    """The fleet's recovery rollout takes reliability from ~2.4% (sd 0.5) to ~0.2% (sd
    0.03): sized for the noise before, the step would not pay its penalty on a raw scale."""
    rng = np.random.default_rng(11)
    values = np.concatenate([np.maximum(0.0, rng.normal(2.4, 0.5, 75)),
                             np.maximum(0.0, rng.normal(0.2, 0.03, 15))])
    found = find_shifts(values)
    assert [s.index for s in found] == [75]
    assert found[0].change_pts == pytest.approx(0.2 - 2.4, abs=0.25)


def test_a_step_that_lands_over_two_days_starts_on_the_first() -> None:
    """A rollout reaches jobs as they start: its day is part-way to the new level."""
    values = np.full(DAYS, 3.0) + 0.05 * np.sin(np.arange(DAYS))
    values[40] += 0.45 * 2.0
    values[41:] += 2.0
    assert [s.index for s in find_shifts(values)] == [40]


def test_a_shift_reports_the_levels_either_side() -> None:
    values = np.concatenate([np.full(30, 2.0), np.full(30, 5.0), np.full(30, 1.0)])
    values += 0.01 * np.cos(np.arange(90))
    found = find_shifts(values)
    assert [s.index for s in found] == [30, 60]
    assert found[0].before_pct == pytest.approx(2.0, abs=0.01)
    assert found[0].after_pct == pytest.approx(5.0, abs=0.01)
    assert found[1].change_pts == pytest.approx(-4.0, abs=0.02)
    assert Shift(3, 1.0, 2.5).change_pts == 1.5


def test_welch_and_the_t_distribution() -> None:
    assert student_t_two_sided(2.228139, 10) == pytest.approx(0.05, abs=1e-5)
    assert student_t_two_sided(1.959964, 1e7) == pytest.approx(0.05, abs=1e-5)
    assert student_t_two_sided(0.0, 5) == pytest.approx(1.0)
    assert student_t_two_sided(12.706205, 1) == pytest.approx(0.05, abs=1e-5)
    before, after = np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.0, 4.0, 5.0, 6.0])
    shift, p = welch(before, after)
    assert shift == 2.0
    assert p == pytest.approx(student_t_two_sided(2.0 / math.sqrt(5 / 6), 6.0), rel=1e-9)
    assert welch(before, after, inflation=3.0)[1] > p  # fewer independent days: less sure
    assert welch(np.ones(4), np.ones(4) * 2) == (1.0, 0.0)
    assert welch(np.ones(4), np.ones(4)) == (0.0, 1.0)
