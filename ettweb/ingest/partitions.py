"""Daily partitions of the events table, created ahead of the events that need them.

The events table is RANGE-partitioned on ``coalesce(start, ts)`` (epoch seconds, migration
0002) so old days can be detached or dropped whole instead of deleted row by row. A DEFAULT
partition catches outliers (clock skew, replayed history, the spec's toy timestamps), so an
insert never fails for want of a partition. Partitions are made for each batch's days that
fall inside a window around now (``ETT_PARTITION_DAYS_BACK`` / ``_AHEAD``) and by the periodic
beat task ``ett.ensure_event_partitions``; a day outside the window stays in the default
partition rather than creating thousands of tiny tables for garbage timestamps.

``manage.py ett_import`` brings a team's history (months or years old) on purpose, so it asks
for ``any_age``: every day its events fall on gets its partition, whatever its age, and old
days can be detached or dropped like recent ones. The worker keeps its window.

Creating a day whose rows already sit in the default partition moves them first: Postgres
refuses to attach a range the default partition holds rows of.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction

DAY_S = 86_400
PARENT = "ingest_event"
DEFAULT_PARTITION = "ingest_event_default"
KEY = 'coalesce("start", "ts")'  # the partition key expression
#: Serializes partition DDL across workers (any constant unique to this use).
_ADVISORY_KEY = 0x45_54_54_50  # "ETTP"
_known_days: set[int] = set()


def day_of(epoch: float) -> int:
    """The UTC day (as its first epoch second) an event time falls in."""
    return int(epoch // DAY_S) * DAY_S


def partition_name(day: int) -> str:
    """``ingest_event_p20261118`` for the day starting at ``day``."""
    return f"{PARENT}_p{datetime.fromtimestamp(day, UTC):%Y%m%d}"


def window(now: float | None = None) -> tuple[int, int]:
    """First and last day (inclusive) for which partitions are created automatically."""
    today = day_of(time.time() if now is None else now)
    return (today - settings.ETT_PARTITION_DAYS_BACK * DAY_S,
            today + settings.ETT_PARTITION_DAYS_AHEAD * DAY_S)


def existing_days() -> set[int]:
    """Days that have a partition now, read from the catalog."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s", [PARENT])
        names = [row[0] for row in cursor.fetchall()]
    prefix = f"{PARENT}_p"
    return {int(datetime.strptime(name[len(prefix):], "%Y%m%d").replace(tzinfo=UTC).timestamp())
            for name in names if name.startswith(prefix)}


#: The days an ``any_age`` partition can be made for: years 1000-9999, whose names have the
#: four-digit ``%Y`` that ``existing_days`` parses back. Beyond, events stay in the default.
NAMEABLE_DAYS = (day_of(datetime(1000, 1, 1, tzinfo=UTC).timestamp()),
                 day_of(datetime(9999, 12, 31, tzinfo=UTC).timestamp()))


def ensure_days(days: Iterable[int], now: float | None = None, *,
                any_age: bool = False) -> list[str]:
    """Create the partitions of ``days`` inside the window; returns the names created.

    ``any_age`` drops the window (an import of history): every nameable day gets its own.
    Must run outside the transaction that inserts the events: it takes an exclusive lock on
    the default partition, and an insert holding a lock there would wait on it forever.
    """
    first, last = NAMEABLE_DAYS if any_age else window(now)
    wanted = sorted({day for day in days if first <= day <= last} - _known_days)
    if not wanted:
        return []
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_KEY])
        present = existing_days()
        for day in wanted:
            if day not in present:
                _create(cursor, day)
                created.append(partition_name(day))
    _known_days.update(wanted)
    return created


def ensure_for_events(times: Iterable[float], now: float | None = None, *,
                      any_age: bool = False) -> list[str]:
    """Partitions for the days of these event times (the ingest path calls this per batch);
    ``any_age`` as in :func:`ensure_days`."""
    return ensure_days({day_of(t) for t in times}, now, any_age=any_age)


def ensure_ahead(now: float | None = None) -> list[str]:
    """Today's partition and the next ``ETT_PARTITION_DAYS_AHEAD`` days' (the beat task)."""
    today = day_of(time.time() if now is None else now)
    return ensure_days(range(today, window(now)[1] + 1, DAY_S), now)


def _create(cursor: object, day: int) -> None:
    """Create one day's partition, moving that day's rows out of the default partition."""
    name, lo, hi = partition_name(day), float(day), float(day + DAY_S)
    statements = [
        f"LOCK TABLE {DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE",
        f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
        f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE {KEY} >= {lo} AND {KEY} < {hi}"
        f" RETURNING *) INSERT INTO {name} SELECT * FROM moved",
        f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi})",
    ]
    for sql in statements:
        cursor.execute(sql)  # type: ignore[attr-defined]


def forget_known() -> None:
    """Drop the in-process cache of created days (tests recreate databases under it)."""
    _known_days.clear()
