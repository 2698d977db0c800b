"""Rollout tasks: beat's pass that computes the rollout page's standard windows ahead, and
one window a page found without stored draws (the logic is ``ettweb.rollouts.warm``)."""

from __future__ import annotations

import logging

from celery import shared_task

from ettweb.platform.retry import waits_for_database
from ettweb.queries.impact import WindowError
from ettweb.rollouts.warm import warm_impact, warm_impacts

logger = logging.getLogger(__name__)


@shared_task(name="ett.warm_rollout_impacts")
@waits_for_database
def warm_rollout_impacts() -> int:
    """Beat: every rollout's impact at the page's standard windows; returns how many."""
    return warm_impacts().impacts


@shared_task(name="ett.warm_rollout_impact")
@waits_for_database
def warm_rollout_impact(rollout_id: int, window_days: int) -> bool:
    """One rollout's impact at one window, asked for by a page that drew it in memory (its
    draws not stored, or not marked used for a day); whether the rollout still exists."""
    try:
        return warm_impact(int(rollout_id), int(window_days))
    except WindowError as exc:  # only a hand-made message: pages send valid windows
        logger.warning("ett.warm_rollout_impact: window %r: %s", window_days, exc)
        return False
