"""The ingestion window (issue 40): the times an event may carry when it is stored.

Every time field of an event (``start``, ``end``, ``ts``, also those a mark may carry) must
lie between ``ETT_INGEST_EARLIEST`` and the time of ingestion plus
``ETT_INGEST_MAX_FUTURE_S``, both included; otherwise the line is quarantined with the field,
the value and the window. Why: one heartbeat at ``ts=1e18`` stretched its job's window over
3e10 years and ran the rollup refresh out of memory, stopping all ingestion; with the window,
every stored time is bounded by construction, whatever the schema (which bounds no time)
lets through. It is an ingestion policy, so the offline report does not apply it.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ettweb.ingest.quarantine import printable

#: The event fields that hold a time (epoch seconds): each is held to the ingestion window.
TIME_FIELDS = ("start", "end", "ts")


def ingest_window(now: float | None = None) -> tuple[float, float]:
    """The times an event may carry when it is ingested at ``now``: from
    ``ETT_INGEST_EARLIEST`` to ``now + ETT_INGEST_MAX_FUTURE_S``, both included."""
    now = time.time() if now is None else now
    return (float(settings.ETT_INGEST_EARLIEST),
            now + float(settings.ETT_INGEST_MAX_FUTURE_S))


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_problem(event: dict[str, Any], window: tuple[float, float]) -> str | None:
    """Why a time of ``event`` cannot be stored: not a number, or outside ``window``.

    Every time field present is checked, not only the kind's own: the schema lets a mark
    carry a ``start`` too, and the events table is partitioned on ``coalesce(start, ts)``.
    """
    low, high = window
    for name in TIME_FIELDS:
        value = event.get(name)
        if value is None:
            continue
        if type(value) not in (int, float) or not math.isfinite(value):
            return f"event.{name}: {printable(repr(value))[:100]} is not a time (epoch seconds)"
        if not low <= value <= high:
            return (f"event.{name}: {value!r} is outside the ingestion window "
                    f"[{_utc(low)}, {_utc(high)}] (ETT_INGEST_EARLIEST to now + "
                    f"ETT_INGEST_MAX_FUTURE_S)")
    return None
