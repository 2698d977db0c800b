"""Export stored events back as schema-v1 JSONL.

Why: the dashboard's numbers come from the stored events, and the offline report
(``python -m ettweb.attribution FILE``) must be able to reproduce them from exactly those
events — not from a spool the collector has since deleted, nor from a file that missed the
events of a second node. ``manage.py ett_export`` writes them; ``manage.py ett_import`` reads
them back.

Each event is written as the normalized v1 object ``collector.schema.validate_event`` would
return for it (defaults filled in, times as floats), with only the fields the schema defines:
``attrs`` is left out when empty, ``host`` when empty, the step fields when null. Events
stream from a server-side cursor ordered by job, event time (span start or mark ts) and id,
so millions of rows never sit in memory and two exports of the same events are identical.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson
from django.db import connection, transaction

from ettweb.ingest.models import Event
from ettweb.ingest.partitions import KEY

#: Rows fetched per round trip from the server-side cursor.
FETCH_ROWS = 5000
#: Lines joined into one write.
WRITE_LINES = 1000
COLUMNS = ("event_id", "job", "attempt", "kind", "phase", "mark", "start", "end", "ts",
           "rank", "host", "step_start", "step_end", "step", "blocking", "attrs")
_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
Progress = Callable[[int], None]


def parse_day(text: str) -> date:
    """A UTC day written ``YYYY-MM-DD``; raises ValueError otherwise (also for 2026-02-30)."""
    if not _DAY_RE.fullmatch(text):
        raise ValueError(f"expected a UTC day YYYY-MM-DD, got {text!r}")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a calendar day: {text!r}") from None


def _epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class ExportFilter:
    """Which events to export: some jobs (all when empty) and UTC days, both inclusive."""

    jobs: tuple[str, ...] = ()
    since: date | None = None
    until: date | None = None

    def where(self) -> tuple[str, list[Any]]:
        """SQL conditions on the partition key (so Postgres reads only those days)."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.jobs:
            clauses.append("job = ANY(%s)")
            params.append(list(self.jobs))
        if self.since is not None:
            clauses.append(f"{KEY} >= %s")
            params.append(_epoch(self.since))
        if self.until is not None:
            clauses.append(f"{KEY} < %s")
            params.append(_epoch(self.until + timedelta(days=1)))
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def _attrs(value: Any) -> Any:
    """The stored attrs as JSON to embed, or None when empty. Django hands jsonb over as
    text: it is valid JSON already, so it is embedded as is instead of parsed and dumped."""
    if isinstance(value, str):
        return None if value == "{}" else orjson.Fragment(value)
    return value or None


def event_object(row: Sequence[Any]) -> dict[str, Any]:
    """One stored row (``COLUMNS`` order) as a normalized schema-v1 event object."""
    (event_id, job, attempt, kind, phase, mark, start, end, ts, rank, host,
     step_start, step_end, step, blocking, attrs) = row
    event: dict[str, Any] = {"v": 1, "id": event_id, "job": job, "attempt": attempt,
                             "kind": kind}
    if kind == "span":
        event["phase"], event["start"], event["end"] = phase, start, end
    else:
        event["mark"], event["ts"] = mark, ts
    event["rank"] = rank
    if host:
        event["host"] = host
    for name, value in (("step_start", step_start), ("step_end", step_end), ("step", step)):
        if value is not None:
            event[name] = value
    event["blocking"] = blocking
    embedded = _attrs(attrs)
    if embedded is not None:
        event["attrs"] = embedded
    return event


def count_events(selection: ExportFilter) -> int:
    """How many events ``selection`` holds (the progress bar's total)."""
    where, params = selection.where()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {Event._meta.db_table} {where}", params)
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _select(selection: ExportFilter) -> tuple[str, list[Any]]:
    where, params = selection.where()
    columns = ", ".join(connection.ops.quote_name(name) for name in COLUMNS)
    # Byte order (COLLATE "C"): the same file whatever the database's locale.
    return (f"SELECT {columns} FROM {Event._meta.db_table} {where} "
            f'ORDER BY job COLLATE "C", {KEY}, event_id COLLATE "C"'), params


def _rows(selection: ExportFilter) -> Iterator[tuple[Any, ...]]:
    """The selected rows in export order, from a server-side cursor (needs a transaction)."""
    sql, params = _select(selection)
    raw = connection.connection
    assert raw is not None  # the caller's transaction opened it
    with raw.cursor(name="ett_export") as cursor:
        cursor.itersize = FETCH_ROWS
        cursor.execute(sql, params)
        yield from cursor


@dataclass(frozen=True)
class ExportStats:
    """What an export wrote."""

    events: int
    jobs: int


def export_events(write: Callable[[bytes], object], selection: ExportFilter = ExportFilter(),
                  *, progress: Progress | None = None) -> ExportStats:
    """Write the selected events as JSONL through ``write`` (bytes, many lines at a time).

    One statement, hence one snapshot: a batch committing meanwhile is either wholly in the
    file or not at all. ``progress(n)`` is called with the events of each write.
    """
    events = jobs = 0
    last_job: str | None = None
    pending: list[bytes] = []
    with transaction.atomic():
        for row in _rows(selection):
            pending.append(orjson.dumps(event_object(row), option=orjson.OPT_APPEND_NEWLINE))
            if row[1] != last_job:
                jobs, last_job = jobs + 1, row[1]
            if len(pending) >= WRITE_LINES:
                events += _flush(write, pending, progress)
        events += _flush(write, pending, progress)
    return ExportStats(events=events, jobs=jobs)


def _flush(write: Callable[[bytes], object], pending: list[bytes],
           progress: Progress | None) -> int:
    count = len(pending)
    if count:
        write(b"".join(pending))
        pending.clear()
        if progress is not None:
            progress(count)
    return count
