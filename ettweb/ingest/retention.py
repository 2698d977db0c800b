"""Retention: raw events are kept ``ETT_EVENT_RETENTION_DAYS``; what they computed stays.

A fleet of 10,000 GPUs writes tens of millions of events a day; keeping every one forever
buys nothing once its numbers are in the rollups. So beat's ``ett.drop_expired_events``
drops the daily partitions older than the retention window, whole (a ``DROP TABLE``, not a
row-by-row delete), together with the default partition's rows that old and their ids in
the dedup table. Before it does, every chunk those events feed is brought up to date and
marked **final**: a refresh never recomputes a final chunk (it has no events left to read)
and sums it as stored. Rollups, chunks and rollout impacts are kept.

The horizon (:class:`EventHorizon`) then says how far back raw events exist. An event
older than it cannot change anything any more (its chunk is final), so ingestion refuses it
instead of storing an event no number would ever see. That is policy, not bad data: such
events are counted by day and reported in one line (:func:`expired_line`: the worker's log,
``ett_import``'s summary), never quarantined one row each, so re-importing retained raw
files of dropped days leaves the quarantine as it was. Ingestion checks the horizon under a
shared advisory lock and the drop moves it under the exclusive one: a batch storing old
events either commits before the drop (whose marks check then sees its chunks dirty and
waits for the next run) or sees the new horizon.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ettweb.ingest import partitions
from ettweb.ingest.models import EventHorizon, EventId

#: Held shared by every batch that stores events, exclusively by the drop (any constant
#: unique to this use: "ETTR").
LOCK_KEY: Final = 0x45_54_54_52


def lock_for_ingest() -> float | None:
    """Call in a batch's transaction before storing: holds off a drop until commit and
    returns the horizon (``None``: nothing dropped yet)."""
    with connection.cursor() as cursor:  # one round trip: this runs for every batch
        cursor.execute(f"SELECT pg_advisory_xact_lock_shared(%s), (SELECT before FROM "
                       f"{EventHorizon._meta.db_table} ORDER BY id LIMIT 1)", [LOCK_KEY])
        row = cursor.fetchone()
    return None if row is None or row[1] is None else float(row[1])


def horizon() -> float | None:
    row = EventHorizon.objects.order_by("id").values_list("before", flat=True).first()
    return None if row is None else row


def expired_line(count: int, days: Sequence[str]) -> str:
    """One line for the events refused as older than the horizon: how many, which days, why."""
    span = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]} ({len(days)} days)"
    return (f"{count:,} event{'s' if count != 1 else ''} of {span} refused: raw events of "
            "those days were dropped after ETT_EVENT_RETENTION_DAYS and their numbers are "
            "final (kept in the rollups), so storing them would change nothing")


@dataclass(frozen=True)
class Dropped:
    """What one run of the drop did (``skipped``: why it did nothing, when it did not)."""

    before: float | None
    partitions: tuple[str, ...] = ()
    events: int = 0
    chunks_finalized: int = 0
    skipped: str = ""


def drop_expired(now: float | None = None, days: int | None = None) -> Dropped:
    """Drop raw events older than ``days`` (``ETT_EVENT_RETENTION_DAYS``) before ``now``.

    Jobs with chunks still marked in that range are refreshed first; if a batch marks one
    again before the drop takes its lock, nothing is dropped this time (the next run will).
    """
    from ettweb.rollups import chunk_store
    from ettweb.rollups.refresh import refresh_jobs

    keep_days = settings.ETT_EVENT_RETENTION_DAYS if days is None else days
    cutoff = float(partitions.day_of(time.time() if now is None else now)
                   - keep_days * partitions.DAY_S)
    size = chunk_store.chunk_s()
    refresh_jobs(chunk_store.jobs_marked_before(cutoff, size))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        if chunk_store.jobs_marked_before(cutoff, size):
            return Dropped(before=horizon(), skipped="chunks before the cutoff were marked "
                           "again while the drop waited; the next run drops them")
        finalized = chunk_store.finalize_before(cutoff)
        names = [partitions.partition_name(day) for day in sorted(partitions.existing_days())
                 if day + partitions.DAY_S <= cutoff]
        events = _drop(names, cutoff)
        row = EventHorizon.objects.select_for_update().order_by("id").first()
        if row is None:
            row = EventHorizon()
        row.before = max(cutoff, row.before or cutoff)
        row.dropped_events += events
        row.updated_at = timezone.now()
        row.save()
    partitions.forget_known()
    return Dropped(before=row.before, partitions=tuple(names), events=events,
                   chunks_finalized=finalized)


def _drop(names: Iterable[str], cutoff: float) -> int:
    """Drop the partitions in ``names`` and the default partition's rows before
    ``cutoff``, with their ids in the dedup table; returns the events dropped."""
    dropped = 0
    ids = EventId._meta.db_table
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute(f"DELETE FROM {ids} i USING {name} e WHERE i.event_id = e.event_id")
            dropped += _count(cursor, f"SELECT count(*) FROM {name}")
            cursor.execute(f"DROP TABLE {name}")
        cursor.execute(
            f"WITH gone AS (DELETE FROM {partitions.DEFAULT_PARTITION} "
            f"WHERE {partitions.KEY} < %s RETURNING event_id) "
            f"DELETE FROM {ids} i USING gone WHERE i.event_id = gone.event_id", [cutoff])
        dropped += max(0, cursor.rowcount)
    return dropped


def _count(cursor: Any, sql: str) -> int:
    cursor.execute(sql)
    (count,) = cursor.fetchone() or (0,)
    return int(count)
