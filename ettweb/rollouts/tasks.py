"""Rollout tasks: beat's pass that computes the rollout page's standard windows ahead (the
logic is ``ettweb.rollouts.warm``)."""

from __future__ import annotations

from celery import shared_task

from ettweb.retry import waits_for_database
from ettweb.rollouts.warm import warm_impacts


@shared_task(name="ett.warm_rollout_impacts")
@waits_for_database
def warm_rollout_impacts() -> int:
    """Beat: every rollout's impact at the page's standard windows; returns how many."""
    return warm_impacts().impacts
