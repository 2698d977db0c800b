"""How much time one job's refresh may attribute, checked before it attributes any of it.

Why: the engine's pieces grow with events, but a job's rollups hold one row per UTC day and
category, and the chunked sweep cuts every attempt window at midnight. A job whose events
span 10¹⁸ s (one heartbeat from a clock gone wrong, or stored before ingestion bounded
times) would make a refresh allocate in proportion to that span, 10¹³ days, until the kernel
killed the worker — again at every redelivery. So the refresh asks :func:`check_windows`
first, on the job's attempt windows (folded from its chunks' summaries: memory in proportion
to events), and a job outside the bounds fails at once with :class:`JobOutOfBounds`, whose
message says what to fix. Past this check every loop over a job's days runs at most
``max_days`` times.

The bounds: every window lies within the dates a rollup can hold (years 1 to 9999, what both
Python's ``date`` and Postgres's ``date`` take), and the job window spans at most
``max_days`` days (``ETT_REFRESH_MAX_JOB_DAYS``; no training job runs for ten years, a node
whose clock reset to 2000 makes one look like it did).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from .engine import DAY_S, AttemptWindow

#: The default longest job window a refresh attributes, in days (about ten years).
MAX_JOB_DAYS: Final = 3660
#: The first and last epoch seconds a rollup's UTC day can hold (0001-01-01 to 9999-12-31).
EARLIEST_S: Final = datetime(1, 1, 1, tzinfo=UTC).timestamp()
LATEST_S: Final = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


#: The largest count a rollup stores (Postgres ``bigint``, and the chunks' JSON): a sum of
#: repeated steps, each within the schema (steps up to 2^63 - 1), may pass it.
COUNT_MAX: Final = 2**63 - 1


def capped(count: int) -> int:
    """``count``, or :data:`COUNT_MAX` when larger: a stored count saturates rather than
    failing the refresh (no real job repeats 9.2e18 steps; the fuzzer's did)."""
    return count if count <= COUNT_MAX else COUNT_MAX


class JobOutOfBounds(ValueError):
    """A job whose events span more time than a refresh attributes; the message says why."""


def check_windows(windows: Sequence[AttemptWindow], max_days: int = MAX_JOB_DAYS) -> None:
    """Raise :class:`JobOutOfBounds` unless the job window of ``windows`` lies within the
    dates a rollup holds and spans at most ``max_days`` UTC days. Constant work per window."""
    if not windows:
        return
    first = min(w.start for w in windows)
    last = max(w.end for w in windows)
    if not (first >= EARLIEST_S and last <= LATEST_S):
        raise JobOutOfBounds(
            f"job window from {_when(first)} to {_when(last)} lies outside the dates a rollup "
            f"can hold (years 1-9999): an event's time is wrong; delete the job's events "
            f"outside the ingestion window, then retry the refresh")
    days = math.floor(last / DAY_S) - math.floor(first / DAY_S) + 1
    if days > max_days:
        raise JobOutOfBounds(
            f"job window from {_when(first)} to {_when(last)} spans {days:,} days, more than "
            f"ETT_REFRESH_MAX_JOB_DAYS ({max_days:,}): an event's time is likely wrong "
            f"(a node's clock); delete the job's events outside its real run, then retry "
            f"the refresh")


def _when(seconds: float) -> str:
    """An epoch second as a UTC time where it is one, else the number itself."""
    if EARLIEST_S <= seconds <= LATEST_S:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{seconds:.6g} s"
