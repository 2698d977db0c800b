"""Ingestion logic beneath the thin Celery task (Sentry-style layering).

A batch is a list of raw JSONL lines. Each line is parsed and validated by
``collector.schema.parse_event`` (the one schema module); a bad line is quarantined with its
reason and never takes the valid lines of its batch with it. Valid events are inserted with
``ON CONFLICT (event_id) DO NOTHING RETURNING`` so a resent event is stored once and the
counts we report are exact even when two workers ingest the same batch at once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from collector.schema import EventError, parse_event
from ettweb.ingest.models import Event, Job, QuarantinedEvent

BIGINT_MAX = 2**63 - 1
STEP_FIELDS = ("step_start", "step_end", "step")
JOB_META_KEYS = ("model", "team", "cluster")
INSERT_CHUNK = 1000
#: Event columns written on insert, in order (received_at is set by the database).
EVENT_COLUMNS = (
    "event_id", "job", "attempt", "kind", "phase", "mark", "start", "end", "ts", "rank",
    "host", "step_start", "step_end", "step", "blocking", "attrs",
)


@dataclass(frozen=True)
class IngestResult:
    """What happened to a batch: every input line lands in exactly one of the three counts.

    ``jobs`` names every job a valid event of the batch belongs to, duplicates included: the
    caller refreshes their rollups, and a batch retried after a failed refresh is all
    duplicates the second time yet must still refresh its jobs.
    """

    stored: int
    duplicates: int
    rejected: int
    jobs: tuple[str, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict[str, int]:
        return {"stored": self.stored, "duplicates": self.duplicates, "rejected": self.rejected}


@dataclass
class _Sorted:
    """A batch split into storable events and rejected lines (raw text, reason, job)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str | bytes] = field(default_factory=list)  # the raw line of each event
    rejected: list[QuarantinedEvent] = field(default_factory=list)
    in_batch_duplicates: int = 0


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


def _job_of(raw: str) -> str:
    """Best-effort job id of a rejected line, so a job page can count its quarantined lines."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    job = obj.get("job") if isinstance(obj, dict) else None
    return job[:200] if isinstance(job, str) and "\x00" not in job else ""


def _printable(line: Any) -> str:
    """Raw text kept in quarantine; Postgres text cannot hold NUL or lone surrogates."""
    text = line if isinstance(line, str) else json.dumps(line, default=repr)
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _reject(line: Any, reason: str, source: str) -> QuarantinedEvent:
    raw = _printable(line)
    return QuarantinedEvent(raw=raw, reason=reason, source=source[:200], job=_job_of(raw))


def sort_lines(lines: Iterable[Any], source: str = "") -> _Sorted:
    """Parse every line; keep each valid event once (first copy wins) and reject the rest."""
    batch = _Sorted()
    seen: set[str] = set()
    for line in lines:
        if not isinstance(line, str | bytes):
            batch.rejected.append(_reject(line, "line must be a string of JSON", source))
            continue
        try:
            event = parse_event(line)
            problem = _storage_problem(event)
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


def _row(event: dict[str, Any]) -> tuple[Any, ...]:
    values = {name: event.get(name) for name in EVENT_COLUMNS}
    values.update(event_id=event["id"], phase=event.get("phase", ""), mark=event.get("mark", ""),
                  host=event.get("host", ""), attrs=json.dumps(event["attrs"]))
    return tuple(values[name] for name in EVENT_COLUMNS)


def _insert_events(events: Sequence[dict[str, Any]]) -> int:
    """Insert events in chunks (Postgres allows 65535 parameters a statement)."""
    chunks = (events[i:i + INSERT_CHUNK] for i in range(0, len(events), INSERT_CHUNK))
    return sum(_insert_chunk(chunk) for chunk in chunks)


def _insert_chunk(events: Sequence[dict[str, Any]]) -> int:
    """Insert events, skipping ids already stored; returns how many rows were new."""
    if not events:
        return 0
    table = Event._meta.db_table
    columns = ", ".join(connection.ops.quote_name(name) for name in EVENT_COLUMNS)
    one_row = "(" + ", ".join(["%s"] * (len(EVENT_COLUMNS) - 1)) + ", %s::jsonb, now())"
    sql = (f"INSERT INTO {table} ({columns}, received_at) VALUES "
           + ", ".join([one_row] * len(events))
           + " ON CONFLICT (event_id) DO NOTHING RETURNING event_id")
    params = [value for event in events for value in _row(event)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return len(cursor.fetchall())


def _event_time(event: dict[str, Any]) -> float:
    return float(event["end"] if event["kind"] == "span" else event["ts"])


def _job_updates(events: Iterable[dict[str, Any]]) -> dict[str, tuple[float, dict[str, str]]]:
    """Per job: latest event time and model/team/cluster from ``attempt_start`` attrs."""
    jobs: dict[str, tuple[float, dict[str, str]]] = {}
    for event in events:
        latest, meta = jobs.get(event["job"], (float("-inf"), {}))
        if event.get("mark") == "attempt_start":
            meta = meta | {key: str(event["attrs"][key])[:200]
                           for key in JOB_META_KEYS if event["attrs"].get(key) is not None}
        jobs[event["job"]] = (max(latest, _event_time(event)), meta)
    return jobs


def _update_jobs(events: Iterable[dict[str, Any]]) -> None:
    """Create unseen jobs and move their last event time forward (never backward)."""
    updates = _job_updates(events)
    Job.objects.bulk_create(
        [Job(job_id=job, last_event_time=latest) for job, (latest, _) in updates.items()],
        ignore_conflicts=True,
    )
    for job, (latest, meta) in sorted(updates.items()):  # fixed order: no deadlocks
        Job.objects.filter(job_id=job).update(
            last_event_time=Greatest(F("last_event_time"), Value(latest)), **meta)


def _store(events: Sequence[dict[str, Any]]) -> int:
    """Insert events and update their jobs in one transaction; returns how many were new."""
    with transaction.atomic():
        stored = _insert_events(events)
        _update_jobs(events)
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


def ingest_lines(lines: Iterable[Any], source: str = "") -> IngestResult:
    """Store the valid events of a batch once each and quarantine the invalid lines.

    Connection problems (OperationalError) propagate on purpose: the task retries the batch.
    """
    batch = sort_lines(lines, source)
    refused = 0
    try:
        stored = _store(batch.events)
    except (DataError, IntegrityError):
        stored, refused = _store_one_by_one(batch, source)
    QuarantinedEvent.objects.bulk_create(batch.rejected)
    duplicates = len(batch.events) - stored - refused + batch.in_batch_duplicates
    jobs = tuple(sorted({event["job"] for event in batch.events}))
    return IngestResult(stored=stored, duplicates=duplicates, rejected=len(batch.rejected),
                        jobs=jobs)
