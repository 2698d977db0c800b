"""Ingestion logic beneath the thin Celery task (Sentry-style layering).

A batch is a list of raw JSONL lines. Each line is parsed and validated by
``collector.schema.parse_event`` (the one schema module); a bad line is quarantined with its
reason and never takes the valid lines of its batch with it. Valid events are stored by
``_insert_events``: their ids are claimed ``ON CONFLICT DO NOTHING`` first, so a resent
event is stored once and the counts we report are exact even when two workers ingest the
same batch at once.
"""

from __future__ import annotations

import hashlib
import json
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
from ettweb.platform.bulk import json_text_dumper, server_cursor
from ettweb.rollups.chunk_store import mark_chunks
from ettweb.rollups.marks import MARK_STALE_AFTER_S, mark_dirty

BIGINT_MAX = 2**63 - 1
#: A quarantined line keeps this many characters (plus its full size and SHA-256).
QUARANTINE_RAW_CHARS = 4096
#: The job id of a rejected line is looked for in its first characters only.
QUARANTINE_JOB_SCAN_CHARS = 65536
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


def _job_of(raw: str) -> str:
    """Best-effort job id of a rejected line, so a job page can count its quarantined lines."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    job = obj.get("job") if isinstance(obj, dict) else None
    return job[:200] if isinstance(job, str) and "\x00" not in job else ""


def printable(line: Any) -> str:
    """Raw text kept in quarantine; Postgres text cannot hold NUL or lone surrogates."""
    text = line if isinstance(line, str) else json.dumps(line, default=repr)
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _reject(line: Any, reason: str, source: str) -> QuarantinedEvent:
    """A quarantine row: the line's first characters, its full size and hash, the reason."""
    raw = printable(line)
    whole = raw.encode("utf-8")
    # The reason can quote the line (an unknown field's name) and the source is whatever
    # the publisher sent: both get the raw line's treatment, or a NUL fails the whole batch.
    return QuarantinedEvent(raw=raw[:QUARANTINE_RAW_CHARS], raw_bytes=len(whole),
                            raw_sha256=hashlib.sha256(whole).hexdigest(),
                            reason=printable(reason)[:2000], source=printable(source)[:200],
                            job=_job_of(raw[:QUARANTINE_JOB_SCAN_CHARS]))


def quarantine_row(line: Any, reason: str, source: str) -> QuarantinedEvent:
    """An unsaved quarantine row for a line rejected before ingestion (an importer's line
    that no translator could read), kept exactly as the worker keeps its own rejections."""
    return _reject(line, reason, source)


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


def sort_lines(lines: Iterable[Any], source: str = "") -> _Sorted:
    """Parse every line; keep each valid event once (first copy wins) and reject the rest."""
    batch = _Sorted()
    seen: set[str] = set()
    lines = lines if isinstance(lines, Sequence) else list(lines)
    all_plain = _all_plain(lines)
    for line in lines:
        if not isinstance(line, str | bytes):
            batch.rejected.append(_reject(line, "line must be a string of JSON", source))
            continue
        try:
            plain = all_plain or is_plain(line)
            event = parse_event(line, plain=plain)
            problem = _column_problem(event) or (None if plain else _storage_problem(event))
        except EventError as exc:
            batch.rejected.append(_reject(line, str(exc), source))
            continue
        except RecursionError:  # e.g. [[[[...]]]] thousands deep: json gives up, so do we
            batch.rejected.append(_reject(line, "JSON nested too deeply", source))
            continue
        if problem:
            batch.rejected.append(_reject(line, problem, source))
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


def _store_one_by_one(batch: _Sorted, source: str) -> tuple[int, int]:
    """Fallback when the database refused the batch: store event by event, so only the
    event Postgres cannot take is quarantined (with its error) and the rest are kept.
    Returns (stored, refused)."""
    stored = refused = 0
    for event, line in zip(batch.events, batch.lines, strict=True):
        try:
            stored += _store([event])
        except (DataError, IntegrityError) as exc:
            refused += 1
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            batch.rejected.append(_reject(line, f"database refused the event: {reason}", source))
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
    rows = [_reject(line, reason, source) for line in lines[:UNAUTHENTICATED_SAMPLE_LINES]]
    if rows:
        rows[-1].lines += len(lines) - len(rows)  # the lines not kept, counted
    QuarantinedEvent.objects.bulk_create(rows)
    return IngestResult(stored=0, duplicates=0, rejected=len(lines))


def ingest_lines(lines: Iterable[Any], source: str = "", *, nonce: Nonce | None = None,
                 any_age_partitions: bool = False) -> IngestResult:
    """Store the valid events of a batch once each and quarantine the invalid lines.

    Everything a batch writes (its nonce, events, jobs, quarantined lines) commits together.
    A batch whose ``nonce`` was seen before (a broker redelivery after a commit, our own retry,
    or a replay) is ingested again without it: all duplicates, nothing new, its jobs refresh.
    Connection problems (OperationalError) propagate on purpose: the task retries the batch.
    ``any_age_partitions`` gives every day of the batch its partition, however old (an import
    of history, ``partitions.ensure_days``); the worker keeps the window around now.
    """
    lines = list(lines)
    batch = sort_lines(lines, source)
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
    refused = 0
    try:
        stored = _store(batch.events)
    except (DataError, IntegrityError):
        stored, refused = _store_one_by_one(batch, source)
    QuarantinedEvent.objects.bulk_create(batch.rejected)
    duplicates = len(batch.events) - stored - refused + batch.in_batch_duplicates
    jobs = tuple(sorted({event["job"] for event in batch.events}))
    return IngestResult(stored=stored, duplicates=duplicates, rejected=len(batch.rejected),
                        jobs=jobs, expired=sum(batch.expired.values()),
                        expired_days=tuple(sorted(batch.expired)))
