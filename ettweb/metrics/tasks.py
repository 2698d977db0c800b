"""Metrics tasks: beat's pass that raises the counters' floors, which ``/metrics`` shows (the
logic is ``ettweb.metrics.exposition``)."""

from __future__ import annotations

from celery import shared_task

from ettweb.metrics.exposition import raise_floors
from ettweb.platform.retry import waits_for_database
from ettweb.queries import FleetTotalsQuery, calculate


@shared_task(name="ett.raise_counter_floors")
@waits_for_database
def raise_counter_floors() -> int:
    """Beat: every counter series' floor raised to its current total; returns how many."""
    return raise_floors(calculate(FleetTotalsQuery()))
