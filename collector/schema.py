"""ETT event schema v1 — the one module both sides (trainer nodes and the web workers) use.

The contract is ``ETT_SPEC.md`` §2. Validation lives here, and only here, so a trainer's
Reporter, the collector agent, the ingest worker and the offline report can never disagree
about what a valid event is. This module imports nothing outside the standard library: it
runs on training nodes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from collector.spool import ChecksumError, unframe

SCHEMA_VERSION: Final = 1
TRAIN_PHASE: Final = "train"
KINDS: Final = frozenset({"span", "mark"})
MARKS: Final = frozenset({"attempt_start", "attempt_end", "heartbeat"})
END_STATUSES: Final = frozenset({"completed", "failed", "preempted", "cancelled"})
#: Attempt statuses after which the job is said to have failed (ETT_SPEC §3.1, §3.7).
FAILED_STATUSES: Final = frozenset({"failed", "preempted", "lost"})
MAX_SPAN_S: Final = 30 * 24 * 3600.0
MAX_ATTRS_BYTES: Final = 8 * 1024
PHASE_RE: Final = re.compile(r"[a-z][a-z0-9_.-]{0,63}")

FIELDS: Final = frozenset(
    {
        "v", "id", "job", "attempt", "kind", "phase", "start", "end", "mark", "ts", "rank",
        "host", "step_start", "step_end", "step", "blocking", "attrs",
    }
)

Event = dict[str, Any]

#: One encoder for every event: ``json.dumps`` with non-default options builds a new encoder on
#: each call, which is most of its cost on the Reporter's emit path.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class EventError(ValueError):
    """An event that breaks schema v1; ``str(err)`` is the reason shown to people."""


def _int(event: Event, name: str, *, minimum: int = 0) -> int:
    value = event[name]
    if type(value) is not int:  # bool is an int subclass: excluded on purpose
        raise EventError(f"'{name}' must be an integer")
    if value < minimum:
        raise EventError(f"'{name}' must be >= {minimum}")
    return value


def _time(event: Event, name: str) -> float:
    value = event[name]
    if type(value) not in (int, float):
        raise EventError(f"'{name}' must be a number (epoch seconds)")
    if not math.isfinite(value):
        raise EventError(f"'{name}' must be finite")
    return float(value)


def _text(event: Event, name: str, *, min_len: int, max_len: int) -> str:
    value = event[name]
    if not isinstance(value, str):
        raise EventError(f"'{name}' must be a string")
    if not min_len <= len(value) <= max_len:
        raise EventError(f"'{name}' must be {min_len}-{max_len} characters")
    return value


def _require(event: Event, *names: str) -> None:
    for name in names:
        if name not in event:
            raise EventError(f"missing required field '{name}'")


def _check_span(event: Event) -> None:
    _require(event, "phase", "start", "end")
    phase = event["phase"]
    if not isinstance(phase, str) or PHASE_RE.fullmatch(phase) is None:
        raise EventError("'phase' must match [a-z][a-z0-9_.-]{0,63}")
    start, end = _time(event, "start"), _time(event, "end")
    if end < start:
        raise EventError("span end before start")
    if end - start > MAX_SPAN_S:
        raise EventError("span longer than 30 days")
    event["start"], event["end"] = start, end
    if phase == TRAIN_PHASE:
        _require(event, "step_start", "step_end")
    if "step_start" in event or "step_end" in event:
        _require(event, "step_start", "step_end")
        if _int(event, "step_end") < _int(event, "step_start"):
            raise EventError("'step_end' before 'step_start'")


def _check_mark(event: Event) -> None:
    _require(event, "mark", "ts")
    mark = event["mark"]
    if mark not in MARKS:
        raise EventError(f"unknown mark {mark!r}; expected one of {sorted(MARKS)}")
    event["ts"] = _time(event, "ts")
    attrs = event["attrs"]
    if mark == "attempt_start" and "gpus" in attrs:
        gpus = attrs["gpus"]
        if type(gpus) is not int or gpus < 1:
            raise EventError("'attrs.gpus' must be an integer >= 1")
    if mark == "attempt_end" and attrs.get("status") not in END_STATUSES:
        raise EventError(f"attempt_end needs 'attrs.status', one of {sorted(END_STATUSES)}")


def _check_optional(event: Event) -> None:
    if "rank" in event:
        _int(event, "rank")
    else:
        event["rank"] = 0
    if "host" in event:
        _text(event, "host", min_len=0, max_len=200)
    if "step" in event:
        _int(event, "step")
    if "blocking" in event:
        if type(event["blocking"]) is not bool:
            raise EventError("'blocking' must be true or false")
    else:
        event["blocking"] = True
    attrs = event.get("attrs", {})
    if not isinstance(attrs, dict):
        raise EventError("'attrs' must be an object")
    if attrs:
        try:
            size = len(_ENCODER.encode(attrs).encode())
        except (TypeError, ValueError) as exc:  # a tensor, NaN, a set…: not JSON
            raise EventError(f"'attrs' is not JSON: {exc}") from None
        except RecursionError:
            raise EventError("'attrs' is not JSON: nested too deeply") from None
        if size > MAX_ATTRS_BYTES:
            raise EventError("'attrs' larger than 8 KiB")
    event["attrs"] = attrs


def validate_event(obj: Any) -> Event:
    """Return a normalized copy of ``obj`` (defaults filled, times as float) or raise EventError."""
    if not isinstance(obj, dict):
        raise EventError("event must be a JSON object")
    unknown = obj.keys() - FIELDS
    if unknown:
        raise EventError(f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    event = dict(obj)
    _require(event, "v", "id", "job", "attempt", "kind")
    if type(event["v"]) is not int or event["v"] != SCHEMA_VERSION:
        raise EventError(f"unsupported schema version {event['v']!r}; expected {SCHEMA_VERSION}")
    _text(event, "id", min_len=1, max_len=64)
    _text(event, "job", min_len=1, max_len=200)
    _int(event, "attempt")
    _check_optional(event)
    kind = event["kind"]
    if kind == "span":
        _check_span(event)
    elif kind == "mark":
        _check_mark(event)
    else:
        raise EventError(f"unknown kind {kind!r}; expected 'span' or 'mark'")
    return event


def parse_event(line: str | bytes) -> Event:
    """Parse one JSONL line and validate it; bad JSON is an EventError like any other.

    A spool record (``<json>\\t<crc32>``, see ``collector.spool``) is verified and unwrapped
    first, so every reader of events accepts spool segments as well as plain JSONL.
    """
    try:
        line = unframe(line)
    except ChecksumError as exc:
        raise EventError(str(exc)) from None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError(f"bad JSON: {exc}") from None
    return validate_event(obj)


def dump_event(event: Event) -> str:
    """Serialize an event as one compact JSONL line (no trailing newline)."""
    return _ENCODER.encode(event)
