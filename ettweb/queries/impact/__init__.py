"""Rollout impact (ETT_SPEC §6): ETT% before and after a rollout, with an honest interval.

The definitions, in short:

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
happened to run.

Beside §6's numbers (the page labels them *unadjusted*) the result carries the rollout's own
component (§6.1: its lost share, from the same draws), the adjusted estimate (§6.2:
post-stratified by job size), the overlapping rollouts (§6.4) and, for each inconclusive
verdict, what it would take to decide.

The modules, in the order the runner uses them: ``result`` (the query and its result types),
``windows`` (where the windows fall), ``reading`` (the rollups read into per-job sums),
``draws`` (the bootstrap draws, computed once and kept), ``verdicts`` (numbers, intervals
and verdicts from the draws), ``overlaps`` (§6.4) and ``runner`` (:class:`ImpactQueryRunner`,
the steps in order). The arithmetic itself is :mod:`ettweb.statistics.estimators` (pure
numpy), which the calibration benchmark holds to its false-positive rate, power and
coverage. This module names what the rest of the product imports.
"""

from __future__ import annotations

from ettweb.queries.impact.overlaps import scopes_overlap
from ettweb.queries.impact.result import (
    ADJUSTED_METHOD,
    COMPONENT_VERDICTS,
    DEFAULT_WINDOW_DAYS,
    MAX_WINDOW_DAYS,
    MIN_WINDOW_DAYS,
    VERDICTS,
    AdjustedChange,
    AdjustedEffect,
    ComponentEffect,
    ComponentShift,
    ComponentVerdict,
    GroupImpact,
    ImpactQuery,
    ImpactResult,
    Inconclusive,
    LostShare,
    Overlap,
    RolloutInfo,
    TrendDay,
    Verdict,
    WindowError,
)
from ettweb.queries.impact.runner import ImpactQueryRunner
from ettweb.queries.impact.windows import Windows, rollout_windows

__all__ = [
    "ADJUSTED_METHOD",
    "COMPONENT_VERDICTS",
    "DEFAULT_WINDOW_DAYS",
    "MAX_WINDOW_DAYS",
    "MIN_WINDOW_DAYS",
    "VERDICTS",
    "AdjustedChange",
    "AdjustedEffect",
    "ComponentEffect",
    "ComponentShift",
    "ComponentVerdict",
    "GroupImpact",
    "ImpactQuery",
    "ImpactQueryRunner",
    "ImpactResult",
    "Inconclusive",
    "LostShare",
    "Overlap",
    "RolloutInfo",
    "TrendDay",
    "Verdict",
    "WindowError",
    "Windows",
    "rollout_windows",
    "scopes_overlap",
]
