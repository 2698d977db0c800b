"""Ingestion logic beneath the thin Celery task (Sentry-style layering).

A batch is a list of raw JSONL lines. Each line is parsed and validated by
``collector.schema.parse_event`` (the one schema module); a bad line is quarantined with its
reason and never takes the valid lines of its batch with it. Valid events are stored by
``_insert_events``: their ids are claimed ``ON CONFLICT DO NOTHING`` first, so a resent
event is stored once and the counts we report are exact even when two workers ingest the
same batch at once.

What a batch may hold is bounded by construction (issue 40):

- every time field (``start``, ``end``, ``ts``) lies in the ingestion window,
  ``ETT_INGEST_EARLIEST`` to now + ``ETT_INGEST_MAX_FUTURE_S``; a line outside it is
  quarantined with the field, the value and the window (one heartbeat at ``ts=1e18`` once
  stretched a job over 3e10 years and ran the refresh out of memory);
- every string is storable before anything is written: a NUL or a lone surrogate anywhere in
  an event quarantines its line, and every text column of a quarantine row is made storable,
  so no row the worker writes can fail on its text;
- one line's failure never reaches the batch: an error reading a line quarantines that line,
  and an unexpected error storing the batch splits it in halves (savepoints) until only the
  offending events are left, each quarantined with the error.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction

from collector.schema import EventError, dump_attrs, is_plain, parse_event
from ettweb.ingest import partitions, retention
from ettweb.ingest.jobs import update_jobs
from ettweb.ingest.models import BatchNonce, Event, EventId, QuarantinedEvent
from ettweb.ingest.quarantine import QUARANTINE_RAW_CHARS as QUARANTINE_RAW_CHARS
from ettweb.ingest.quarantine import error_text, reject, save_quarantined
from ettweb.ingest.quarantine import printable as printable
from ettweb.ingest.quarantine import quarantine_row as quarantine_row
from ettweb.ingest.window import ingest_window, window_problem
from ettweb.platform.bulk import json_text_dumper, server_cursor
from ettweb.platform.retry import DATABASE_ERRORS
from ettweb.rollups.chunk_store import mark_chunks
from ettweb.rollups.marks import MARK_STALE_AFTER_S, mark_dirty

logger = logging.getLogger(__name__)
BIGINT_MAX = 2**63 - 1
#: Lines kept of a batch refused whole (unauthenticated); the rest are counted.
UNAUTHENTICATED_SAMPLE_LINES = 10
#: attempt and rank are integer (32-bit) columns. Checked before the binary COPY, which would
#: otherwise wrap a larger value around instead of refusing it.
INT_MAX = 2**31 - 1
STEP_FIELDS = ("step_start", "step_end", "step")
#: Event columns written, in order (``received_at`` is the database's ``now()``: its
#: default, ingest migration 0009).
EVENT_COLUMNS = (
    "event_id", "job", "attempt", "kind", "phase", "mark", "start", "end", "ts", "rank",
    "host", "step_start", "step_end", "step", "blocking", "attrs",
)


@dataclass(frozen=True)
class IngestResult:
    """What happened to a batch: every input line lands in exactly one of the four counts.

    ``jobs`` names every job a valid event of the batch belongs to, duplicates included: the
    caller refreshes their rollups, and a batch retried after a failed refresh is all
    duplicates the second time yet must still refresh its jobs.
    """

    stored: int
    duplicates: int
    rejected: int
    jobs: tuple[str, ...] = field(default=(), compare=False)
    #: Jobs whose rollup refresh the caller must schedule (newly marked dirty, or stale).
    refresh: tuple[str, ...] = field(default=(), compare=False)
    #: The batch's nonce was seen before (a redelivery or a replay of a stored batch).
    seen_before: bool = field(default=False, compare=False)
    #: Events older than the retention horizon, refused by policy and not quarantined (the
    #: quarantine is for bad data): their days' raw events were dropped and their numbers
    #: are final (``retention``). ``expired_days`` are their UTC days.
    expired: int = 0
    expired_days: tuple[str, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict[str, int]:
        return {"stored": self.stored, "duplicates": self.duplicates, "rejected": self.rejected,
                "expired": self.expired}


@dataclass
class _Sorted:
    """A batch split into storable events and rejected lines (raw text, reason, job)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str | bytes] = field(default_factory=list)  # the raw line of each event
    rejected: list[QuarantinedEvent] = field(default_factory=list)
    in_batch_duplicates: int = 0
    #: Events refused as older than the retention horizon, by UTC day.
    expired: Counter[str] = field(default_factory=Counter)


def _storage_problem(value: Any, where: str = "event") -> str | None:
    """Why Postgres could not store ``value`` as given (NUL, lone surrogate, int > bigint)."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{where}: NUL character cannot be stored"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where}: invalid unicode (lone surrogate)"
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > BIGINT_MAX:
        return f"{where}: integer larger than 64 bits"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{where}: NaN or infinite number cannot be stored"
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = _storage_problem(key, where) or _storage_problem(item, f"{where}.{key}")
            if problem:
                return problem
    elif isinstance(value, list):
        return next(filter(None, (_storage_problem(item, where) for item in value)), None)
    return None


def _column_problem(event: dict[str, Any]) -> str | None:
    """Why an integer column cannot hold the event's attempt or rank (schema: any int >= 0)."""
    for name in ("attempt", "rank"):
        if event[name] > INT_MAX:
            return f"event.{name}: integer larger than 32 bits"
    return None


def _all_plain(lines: Sequence[Any]) -> bool:
    """Whether every line is plain (``is_plain``), asked once of the lines joined by a comma.

    Why joined: one scan of the batch instead of one call per line. The same answer: a
    comma is in none of the texts ``is_plain`` looks for (``\\u``, ``NaN``, ``Infinity``,
    19 digits) and a non-ASCII character stays one, so the joined text holds one exactly
    when a line does.
    """
    if all(type(line) is str for line in lines):
        return is_plain(",".join(lines))
    if all(type(line) is bytes for line in lines):
        return is_plain(b",".join(lines))
    return False


def sort_lines(lines: Iterable[Any], source: str = "", *, now: float | None = None) -> _Sorted:
    """Parse every line; keep each valid event once (first copy wins) and reject the rest.

    An event is valid when schema v1 accepts it, Postgres can store every value of it, and
    its times lie in the ingestion window at ``now`` (:func:`ingest_window`). Any error while
    reading one line rejects that line with the error as its reason, never the batch.
    """
    batch = _Sorted()
    seen: set[str] = set()
    lines = lines if isinstance(lines, Sequence) else list(lines)
    all_plain = _all_plain(lines)
    window = ingest_window(now)
    for line in lines:
        if not isinstance(line, str | bytes):
            batch.rejected.append(reject(line, "line must be a string of JSON", source))
            continue
        try:
            plain = all_plain or is_plain(line)
            event = parse_event(line, plain=plain)
            problem = (_column_problem(event) or (None if plain else _storage_problem(event))
                       or window_problem(event, window))
        except EventError as exc:
            batch.rejected.append(reject(line, str(exc), source))
            continue
        except RecursionError:  # e.g. [[[[...]]]] thousands deep: json gives up, so do we
            batch.rejected.append(reject(line, "JSON nested too deeply", source))
            continue
        except Exception as exc:  # one line's error never reaches the batch
            batch.rejected.append(reject(line, f"line could not be read: {error_text(exc)}",
                                          source))
            continue
        if problem:
            batch.rejected.append(reject(line, problem, source))
        elif event["id"] in seen:
            batch.in_batch_duplicates += 1
        else:
            seen.add(event["id"])
            batch.events.append(event)
            batch.lines.append(line)
    return batch


def home_time(event: dict[str, Any]) -> float:
    """The value the events table is partitioned on, ``coalesce(start, ts)``: a span's
    start, a mark's time."""
    return float(event["start"] if event["kind"] == "span" else event["ts"])


def _row(event: dict[str, Any]) -> tuple[Any, ...]:
    """The event's values in ``EVENT_COLUMNS`` order, ready for the binary COPY (built
    directly: this runs once per stored event). The attrs go as JSON text."""
    get = event.get
    attrs = event["attrs"]
    return (event["id"], event["job"], event["attempt"], event["kind"], get("phase", ""),
            get("mark", ""), get("start"), get("end"), get("ts"), event["rank"], get("host", ""),
            get("step_start"), get("step_end"), get("step"), event["blocking"],
            dump_attrs(attrs) if attrs else "{}")


#: Postgres types of ``EVENT_COLUMNS`` for the binary COPY: Postgres then parses no text
#: (floats above all), which made the COPY 2.5x cheaper than text format (1.0 vs 2.8 µs a row).
COPY_TYPES = ("varchar", "varchar", "int4", "varchar", "varchar", "varchar", "float8",
              "float8", "float8", "int4", "varchar", "int8", "int8", "int8", "bool", "jsonb")


def _claim_sql() -> str:
    """Claim the ids in the dedup table; returns the ids that were there already."""
    return (f"WITH ids AS (SELECT unnest(%b::text[]) AS event_id), claimed AS ("
            f"INSERT INTO {EventId._meta.db_table} (event_id) SELECT event_id FROM ids "
            'ORDER BY event_id COLLATE "C" ON CONFLICT DO NOTHING RETURNING event_id) '
            "SELECT event_id FROM ids EXCEPT SELECT event_id FROM claimed")


def _claim_ids(ids: list[str]) -> set[str]:
    """Claim ``ids`` (distinct, sorted) in the dedup table; returns those already taken.

    Nearly every batch brings only new ids, so they are COPied in first, the cheapest write
    Postgres has. A taken id fails that COPY (unique violation): its savepoint goes and the
    ids are claimed again in one ``INSERT … ON CONFLICT DO NOTHING``, which says which were
    taken. Either way the ids are written in one order (bytewise: Python's order of str,
    and ``COLLATE "C"``), so two workers storing overlapping batches lock them in the same
    order and never deadlock; the second waits for the first to commit, then finds them
    taken.
    """
    try:
        with transaction.atomic(), server_cursor() as cursor, cursor.copy(
                f"COPY {EventId._meta.db_table} (event_id) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(("varchar",))
            for event_id in ids:
                copy.write_row((event_id,))
        return set()
    except IntegrityError:
        with server_cursor() as cursor:
            cursor.execute(_claim_sql(), [ids])
            return {event_id for (event_id,) in cursor.fetchall()}


def _insert_events(events: Sequence[dict[str, Any]]) -> int:
    """Claim the events' ids, then COPY the events whose id was new straight into the
    partitioned events table (Postgres routes each row to its day); returns how many.

    Two statements per batch, whatever its size: the ids and the events each go as one
    binary COPY, and Postgres parses no text. ``events`` have distinct ids (``sort_lines``
    keeps the first copy of each).
    """
    if not events:
        return 0
    taken = _claim_ids(sorted(event["id"] for event in events))
    new = [event for event in events if event["id"] not in taken] if taken else events
    if new:
        columns = ", ".join(connection.ops.quote_name(name) for name in EVENT_COLUMNS)
        with server_cursor() as cursor:
            json_text_dumper(cursor)
            with cursor.copy(f"COPY {Event._meta.db_table} ({columns}) "
                             "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(COPY_TYPES)
                for event in new:
                    copy.write_row(_row(event))
    return len(new)


def _store(events: Sequence[dict[str, Any]]) -> int:
    """Insert events and update their jobs in one transaction; returns how many were new."""
    with transaction.atomic():
        stored = _insert_events(events)
        update_jobs(events)
    return stored


def _store_isolating(batch: _Sorted, source: str, error: Exception) -> tuple[int, set[int]]:
    """Fallback when storing the whole batch failed for any reason but a lost connection:
    store it in halves, each in a savepoint, splitting a half that fails again until the
    events that fail alone are found; each of those is quarantined with its error and the
    rest are stored. Returns (stored, indexes of the refused events).

    Why halves: one bad event among n costs about 2·log2(n) tries, not n savepoints. A
    connection error is not the data's fault: it propagates, and the task waits for the
    database (``ettweb.platform.retry``).
    """
    stored, refused = 0, set()
    # (first, end, its error when known to fail)
    pending: list[tuple[int, int, Exception | None]] = [(0, len(batch.events), error)]
    while pending:
        first, end, failed = pending.pop()
        if failed is None:
            try:
                stored += _store(batch.events[first:end])
                continue
            except DATABASE_ERRORS:
                raise
            except Exception as exc:  # isolated, then quarantined with its error
                failed = exc
        if end - first > 1:
            middle = (first + end) // 2
            pending += [(middle, end, None), (first, middle, None)]
            continue
        refused.add(first)
        what = ("database refused the event" if isinstance(failed, DataError | IntegrityError)
                else "storing the event failed")
        batch.rejected.append(reject(batch.lines[first], f"{what}: {error_text(failed)}", source))
    return stored, refused


@dataclass(frozen=True)
class Nonce:
    """The nonce of a verified batch, claimed in the transaction that stores the batch: a
    batch that died before commit (killed worker, lost database) is redelivered with the same
    nonce and must not be mistaken for a replay."""

    collector_id: str
    value: str
    seen_at: float


REPLAYED = "replayed batch (nonce seen)"


class ReplayedBatch(Exception):
    """The batch's nonce was already claimed by a stored batch."""


def claim_nonce(nonce: Nonce) -> None:
    """Record ``nonce`` inside the caller's transaction; :class:`ReplayedBatch` if it was
    recorded before (by a stored batch or health report)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {BatchNonce._meta.db_table} (nonce, collector_id, seen_at) "
            "VALUES (%s, %s, %s) ON CONFLICT (nonce) DO NOTHING RETURNING id",
            [nonce.value, nonce.collector_id, nonce.seen_at])
        if cursor.fetchone() is None:
            raise ReplayedBatch(REPLAYED)


def reject_batch(lines: Iterable[Any], source: str, reason: str) -> IngestResult:
    """Refuse a whole batch (it failed authentication): its first
    ``UNAUTHENTICATED_SAMPLE_LINES`` lines are kept, for the operator to see what arrived,
    and every line is counted. It is not parsed, and none of it is stored as an event.

    Unauthenticated input is anyone's: keeping every line of it would let whoever reaches
    the broker fill the database without a credential. The count stays exact.
    """
    lines = list(lines)
    rows = [reject(line, reason, source) for line in lines[:UNAUTHENTICATED_SAMPLE_LINES]]
    if rows:
        rows[-1].lines += len(lines) - len(rows)  # the lines not kept, counted
    save_quarantined(rows)
    return IngestResult(stored=0, duplicates=0, rejected=len(lines))


def ingest_lines(lines: Iterable[Any], source: str = "", *, nonce: Nonce | None = None,
                 any_age_partitions: bool = False, now: float | None = None) -> IngestResult:
    """Store the valid events of a batch once each and quarantine the invalid lines.

    Everything a batch writes (its nonce, events, jobs, quarantined lines) commits together.
    A batch whose ``nonce`` was seen before (a broker redelivery after a commit, our own retry,
    or a replay) is ingested again without it: all duplicates, nothing new, its jobs refresh.
    Connection problems (OperationalError) propagate on purpose: the task retries the batch.
    ``any_age_partitions`` gives every day of the batch its partition, however old (an import
    of history, ``partitions.ensure_days``); the worker keeps the window around now. The
    ingestion window (:func:`ingest_window`, at ``now``) holds for imports too.
    """
    lines = list(lines)
    batch = sort_lines(lines, source, now=now)
    partitions.ensure_for_events((home_time(event) for event in batch.events),
                                 any_age=any_age_partitions)
    try:
        return _store_and_mark(batch, source, nonce)
    except ReplayedBatch:
        # Seen before: the same signed lines were stored (a redelivery, or a replay). Storing
        # them again stores nothing new (event ids), quarantines nothing, and lets the jobs
        # refresh; quarantining it whole would copy every line of it into the quarantine.
        pass
    return replace(_store_and_mark(batch, source, None), seen_before=True)


def _store_and_mark(batch: _Sorted, source: str, nonce: Nonce | None) -> IngestResult:
    """One transaction: claim the nonce, store the batch, mark its jobs' rollups dirty and
    the chunks its events land in (the refresh recomputes those, ``rollups.chunk_store``)."""
    with transaction.atomic():
        if nonce is not None:
            claim_nonce(nonce)
        before = retention.lock_for_ingest()
        if before is not None:
            _refuse_older(batch, before)
        result = _store_sorted(batch, source)
        refresh = mark_dirty(result.jobs, time.time(), MARK_STALE_AFTER_S)
        mark_chunks(batch.events)
    return replace(result, refresh=tuple(refresh))


def _refuse_older(batch: _Sorted, before: float) -> None:
    """Take the events older than the retention horizon out of the batch, counted by day:
    their chunks are final, so storing them would change no number (``retention``). They are
    refused by policy, not as bad data, so nothing goes to the quarantine."""
    kept: list[tuple[dict[str, Any], Any]] = []
    for event, line in zip(batch.events, batch.lines, strict=True):
        at = home_time(event)
        if at < before:
            batch.expired[datetime.fromtimestamp(at, UTC).date().isoformat()] += 1
        else:
            kept.append((event, line))
    if len(kept) < len(batch.events):
        batch.events = [event for event, _ in kept]
        batch.lines = [line for _, line in kept]


def _store_sorted(batch: _Sorted, source: str) -> IngestResult:
    """Store the valid events and the quarantine rows of a sorted batch (inside the caller's
    transaction). Anything but a lost connection that fails the batch as a whole is isolated
    to the events it comes from (:func:`_store_isolating`), which are quarantined and taken
    out of the batch: they neither count as duplicates nor mark their job."""
    try:
        stored = _store(batch.events)
    except DATABASE_ERRORS:
        raise
    except Exception as exc:  # isolated event by event below
        logger.warning("storing a batch of %d events failed (%s); isolating the events at "
                       "fault", len(batch.events), error_text(exc))
        stored, refused = _store_isolating(batch, source, exc)
        batch.events = [event for at, event in enumerate(batch.events) if at not in refused]
        batch.lines = [line for at, line in enumerate(batch.lines) if at not in refused]
    save_quarantined(batch.rejected)
    duplicates = len(batch.events) - stored + batch.in_batch_duplicates
    jobs = tuple(sorted({event["job"] for event in batch.events}))
    return IngestResult(stored=stored, duplicates=duplicates, rejected=len(batch.rejected),
                        jobs=jobs, expired=sum(batch.expired.values()),
                        expired_days=tuple(sorted(batch.expired)))
