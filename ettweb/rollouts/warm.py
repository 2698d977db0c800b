"""Compute rollout impacts ahead, for the windows the rollout page offers, so that a person
opening a rollout waits for the rollups to be read and never for a bootstrap.

Why: the interval's 2,000 draws over ~10,000 jobs take ~300 ms of CPU at fleet scale, most
of a rollout page's first load; the draws are stored by a digest of their inputs
(:class:`ettweb.rollouts.models.BootstrapDraws`), so computing each rollout's standard
windows once makes every later load of them cheap until the rollups in those windows
change. Beat runs :func:`warm_impacts` every few minutes (``ettweb.platform.schedule``): for a past
rollout whose windows are complete that costs one read of the rollups per window, since
its digests do not move; a live rollout's after window grows each day and is drawn again.
Any other window (the page takes 1-90 days) is drawn in memory on its first request, which
asks the worker to keep it (:func:`warm_impact`, task ``ett.warm_rollout_impact``): a GET
never writes, so storing draws, marking them used and keeping summaries happen here only.
Each computed impact's headline is kept as an :class:`ImpactSummary`, which ``/rollouts/``
lists, sorts and filters by.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner, ImpactResult
from ettweb.queries.markers import Headline
from ettweb.rollouts.models import BootstrapDraws, ImpactSummary, Rollout

#: The windows (days) the rollout page links to, 14 being the default.
WARM_WINDOWS: Final = (7, 14, 28, 60, 90)
#: Draws nobody asked for in this long are deleted (a changed digest leaves its old row).
KEEP_UNUSED: Final = timedelta(days=7)


def store_summary(result: ImpactResult) -> None:
    """Keep the impact's headline for ``/rollouts/`` (one row per rollout and window)."""
    h = Headline.of(result, datetime.now(UTC))
    component_ci, adjusted_ci = h.component_ci95_pts, h.adjusted_ci95_pts
    ImpactSummary.objects.update_or_create(
        rollout_id=result.rollout.id, window_days=result.window_days, defaults={
            "computed_at": h.computed_at, "partial": h.partial, "verdict": h.verdict,
            "component_verdict": h.component_verdict,
            "component_change_pts": h.component_change_pts,
            "component_ci_low": component_ci[0] if component_ci else None,
            "component_ci_high": component_ci[1] if component_ci else None,
            "adjusted_verdict": h.adjusted_verdict,
            "adjusted_change_pts": h.adjusted_change_pts,
            "adjusted_ci_low": adjusted_ci[0] if adjusted_ci else None,
            "adjusted_ci_high": adjusted_ci[1] if adjusted_ci else None})


@dataclass(frozen=True)
class WarmStats:
    impacts: int
    seconds: float
    pruned: int


def warm_impacts(windows: tuple[int, ...] = WARM_WINDOWS) -> WarmStats:
    """Compute every rollout's impact at each of ``windows`` (storing new draws; reading a
    stored one marks it used) and prune the draws unused for ``KEEP_UNUSED``."""
    began = time.perf_counter()
    started = datetime.now(UTC)
    rollouts = list(Rollout.objects.order_by("id").values_list("id", flat=True))
    for rollout_id in rollouts:
        for window in windows:
            warm_impact(rollout_id, window)
    pruned, _ = BootstrapDraws.objects.filter(used_at__lt=started - KEEP_UNUSED).delete()
    return WarmStats(impacts=len(rollouts) * len(windows),
                     seconds=time.perf_counter() - began, pruned=pruned)


def warm_impact(rollout_id: int, window_days: int) -> bool:
    """One rollout's impact at one window: its draws stored (or marked used) and its
    headline kept; whether the rollout exists."""
    result = ImpactQueryRunner(ImpactQuery(rollout_id, window_days), keep=True).calculate()
    if result is None:
        return False
    store_summary(result)
    return True
