"""ETT event schema v1 — the one module both sides (trainer nodes and the web workers) use.

The contract is ``ETT_SPEC.md`` §2. Validation lives here, and only here, so a trainer's
Reporter, the collector agent, the ingest worker and the offline report can never disagree
about what a valid event is. It needs nothing outside the standard library (it runs on
training nodes); where ``orjson`` is installed (the web/worker install), ``parse_event`` uses
it for plain lines — the ingest worker's hottest loop.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from collector.spool import ChecksumError, unframe

try:  # optional: a faster parser for the worker; training nodes may lack it
    import orjson

    _fast_loads: Any = orjson.loads
    _fast_dumps: Any = orjson.dumps
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    _fast_loads = _fast_dumps = None

SCHEMA_VERSION: Final = 1
TRAIN_PHASE: Final = "train"
KINDS: Final = frozenset({"span", "mark"})
MARKS: Final = frozenset({"attempt_start", "attempt_end", "heartbeat"})
END_STATUSES: Final = frozenset({"completed", "failed", "preempted", "cancelled"})
#: Attempt statuses after which the job is said to have failed (ETT_SPEC §3.1, §3.8).
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
    if not isinstance(mark, str) or mark not in MARKS:  # a list is unhashable: test type first
        raise EventError(f"unknown mark {mark!r}; expected one of {sorted(MARKS)}")
    event["ts"] = _time(event, "ts")
    attrs = event["attrs"]
    if mark == "attempt_start" and "gpus" in attrs:
        gpus = attrs["gpus"]
        if type(gpus) is not int or gpus < 1:
            raise EventError("'attrs.gpus' must be an integer >= 1")
    status = attrs.get("status")
    if mark == "attempt_end" and (not isinstance(status, str) or status not in END_STATUSES):
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


_BASE_FIELDS: Final = frozenset({"v", "id", "job", "attempt", "kind"})
#: Phase names already seen to match PHASE_RE: a handful per fleet, checked once each.
_GOOD_PHASES: set[str] = set()
_MAX_GOOD_PHASES: Final = 4096


def _finite(value: Any) -> bool:
    return (type(value) is float or type(value) is int) and math.isfinite(value)


def _common_case(event: Event) -> bool:
    """Whether ``event`` (unknown fields already excluded) is valid by the common route: no
    attrs, every field of the right type and range. Normalizes it as validate_event does.

    Why: validation is the largest share of the ingest worker's parsing. This route only
    accepts what the full checks accept, and anything else (attrs present, an attempt_end,
    any doubt) goes through them, so errors and results are unchanged.
    """
    get = event.get
    ident, job, attempt, rank, host, step = (get("id"), get("job"), get("attempt"),
                                             get("rank", 0), get("host", ""), get("step", 0))
    if not (event.keys() >= _BASE_FIELDS and type(event["v"]) is int and event["v"] == 1
            and type(ident) is str and 0 < len(ident) <= 64
            and type(job) is str and 0 < len(job) <= 200
            and type(attempt) is int and attempt >= 0 and type(rank) is int and rank >= 0
            and type(host) is str and len(host) <= 200 and type(step) is int and step >= 0
            and type(get("blocking", True)) is bool and get("attrs", _NO_ATTRS) == {}):
        return False
    kind = event["kind"]
    if kind == "span":
        ok = _common_span(event)
    elif kind == "mark":
        mark: Any = get("mark")
        ts: Any = get("ts")
        ok = type(mark) is str and mark in _COMMON_MARKS and _finite(ts)
        if ok:
            event["ts"] = float(ts)
    else:
        return False
    if ok:
        event.setdefault("rank", 0)
        event.setdefault("blocking", True)
        event["attrs"] = {}
    return ok


_NO_ATTRS: Final[dict[str, Any]] = {}
#: attempt_end needs attrs.status, so it never takes the common route (empty attrs).
_COMMON_MARKS: Final = MARKS - {"attempt_end"}


def _common_span(event: Event) -> bool:
    get = event.get
    phase: Any = get("phase")
    start: Any = get("start")
    end: Any = get("end")
    if not (type(phase) is str and _finite(start) and _finite(end)
            and start <= end and end - start <= MAX_SPAN_S and _known_phase(phase)):
        return False
    has_start, has_end = "step_start" in event, "step_end" in event
    if has_start or has_end or phase == TRAIN_PHASE:
        first, last = get("step_start"), get("step_end")
        if not (type(first) is int and type(last) is int and 0 <= first <= last):
            return False
    event["start"], event["end"] = float(start), float(end)
    return True


def _known_phase(phase: str) -> bool:
    """Whether ``phase`` matches PHASE_RE, remembering the names that do."""
    if phase in _GOOD_PHASES:
        return True
    if PHASE_RE.fullmatch(phase) is None:
        return False
    if len(_GOOD_PHASES) < _MAX_GOOD_PHASES:
        _GOOD_PHASES.add(phase)
    return True


# --------------------------------------------------------------------------- a Reporter's route
#: The fields besides its own that a Reporter's span or mark may carry on the quick route.
QUICK_SPAN_FIELDS: Final = frozenset({"blocking", "step_start", "step_end", "attrs"})
QUICK_MARK_FIELDS: Final = frozenset({"step"})
#: Bounds on the JSON text of one attrs value: a character of a string (``\ud83d\ude00``),
#: an int below _PLAIN_INT (sign and 15 digits), a float's repr.
_CHAR_JSON, _PLAIN_INT, _INT_JSON, _FLOAT_JSON = 12, 10**15, 16, 24


def check_identity(job: Any, attempt: Any, rank: Any, host: Any) -> None:
    """Raise EventError unless these are a valid ``job``, ``attempt``, ``rank`` and ``host``.

    Why: a Reporter stamps the same four values on every event; checked once here, they need
    no checking per event on its quick route.
    """
    identity = {"job": job, "attempt": attempt, "rank": rank, "host": host}
    _text(identity, "job", min_len=1, max_len=200)
    _int(identity, "attempt")
    _int(identity, "rank")
    _text(identity, "host", min_len=0, max_len=200)


def quick_span_ok(phase: Any, start: Any, end: Any, fields: dict[str, Any]) -> bool:
    """Whether a span of a checked identity (:func:`check_identity`) with these values is
    valid and already normalized: ``fields`` only QUICK_SPAN_FIELDS, times as floats, attrs
    plain enough to vouch for unencoded.

    Why: it is what a trainer emits per step, so the Reporter checks only the values it did
    not build itself. False means "let validate_event decide", not "invalid": an int time, a
    nested attrs or anything unusual takes the full checks.
    """
    # Two floats with start <= end and end - start <= MAX_SPAN_S are finite: an infinity
    # makes the difference infinite or NaN, and NaN compares false.
    if not (type(start) is float and type(end) is float and start <= end
            and end - start <= MAX_SPAN_S and type(phase) is str
            and (phase in _GOOD_PHASES or _known_phase(phase))
            and fields.keys() <= QUICK_SPAN_FIELDS):
        return False
    if type(fields.get("blocking", True)) is not bool:
        return False
    if "attrs" in fields and not _attrs_surely_fit(fields["attrs"]):
        return False
    if phase == TRAIN_PHASE or "step_start" in fields or "step_end" in fields:
        first, last = fields.get("step_start"), fields.get("step_end")
        return type(first) is int and type(last) is int and 0 <= first <= last
    return True


def _attrs_surely_fit(attrs: Any) -> bool:
    """Whether ``attrs`` is valid without encoding it: a dict of str keys to plain values
    (str, bool, None, ints of at most 15 digits, finite floats) whose JSON could not exceed
    MAX_ATTRS_BYTES even with every character escaped. The encoder is most of the full
    checks' cost; what this cannot vouch for takes them."""
    if type(attrs) is not dict:
        return False
    size = 2
    for key, value in attrs.items():
        kind = type(value)
        if kind is str:
            size += _CHAR_JSON * len(value) + 2
        elif kind is bool or value is None:
            size += 5
        elif kind is int and -_PLAIN_INT < value < _PLAIN_INT:
            size += _INT_JSON
        elif kind is float and math.isfinite(value):
            size += _FLOAT_JSON
        else:
            return False
        if type(key) is not str:
            return False
        size += _CHAR_JSON * len(key) + 4  # quotes, colon, comma
    return size <= MAX_ATTRS_BYTES


def quick_mark_ok(mark: Any, ts: Any, fields: dict[str, Any]) -> bool:
    """Like :func:`quick_span_ok`, for a mark without attrs (never an ``attempt_end``)."""
    if not (type(ts) is float and math.isfinite(ts) and type(mark) is str
            and mark in _COMMON_MARKS and fields.keys() <= QUICK_MARK_FIELDS):
        return False
    step = fields.get("step", 0)
    return type(step) is int and step >= 0


def validate_event(obj: Any) -> Event:
    """Return a normalized copy of ``obj`` (defaults filled, times as float) or raise EventError."""
    if not isinstance(obj, dict):
        raise EventError("event must be a JSON object")
    unknown = obj.keys() - FIELDS
    if unknown:
        raise EventError(f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    event = dict(obj)
    if _common_case(event):
        return event
    event = dict(obj)  # the full checks start again from the caller's values
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


def parse_event(line: str | bytes, *, plain: bool | None = None) -> Event:
    """Parse one JSONL line and validate it; bad JSON is an EventError like any other.

    ``plain`` is ``is_plain(line)`` when the caller already computed it (the ingest worker
    needs it too); a plain line is parsed by orjson when installed.

    A spool record (``<json>\\t<crc32>``, see ``collector.spool``) is verified and unwrapped
    first, so every reader of events accepts spool segments as well as plain JSONL.
    """
    try:
        line = unframe(line)
    except ChecksumError as exc:
        raise EventError(str(exc)) from None
    if _fast_loads is not None and (is_plain(line) if plain is None else plain):
        try:
            return validate_event(_fast_loads(line))
        except ValueError:  # orjson's JSONDecodeError; the standard parser words the reason
            pass
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError(f"bad JSON: {exc}") from None
    return validate_event(obj)


#: ``bytes.translate`` table: every digit becomes ``0``, everything else a space, so a run of
#: 19 digits is one substring search, cheaper than a regex on this hot path.
_DIGITS: Final = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_LONG_NUMBER: Final = b"0" * 19


def is_plain(line: str | bytes) -> bool:
    """Whether ``line`` holds no text that could hide a value Postgres or orjson treat
    differently from the standard parser: a ``\\u`` escape (NUL, lone surrogates), NaN or
    Infinity, non-ASCII text, or a number of 19+ digits (past 64 bits orjson returns a float
    where ``json`` keeps the integer). Nearly every line a Reporter writes is plain; the
    others take the exact path (and the ingest worker checks their values one by one).
    """
    if isinstance(line, bytes):
        return (line.isascii() and b"\\u" not in line and b"NaN" not in line
                and b"Infinity" not in line and _LONG_NUMBER not in line.translate(_DIGITS))
    # str.isascii is O(1) and the searches need no copy; only the digit scan needs bytes.
    return (line.isascii() and "\\u" not in line and "NaN" not in line
            and "Infinity" not in line and _LONG_NUMBER not in line.encode().translate(_DIGITS))


def dump_attrs(attrs: dict[str, Any]) -> str:
    """Compact JSON of an event's (already validated) ``attrs``, as stored in the database."""
    if _fast_dumps is not None:
        return str(_fast_dumps(attrs).decode())
    return _ENCODER.encode(attrs)


def dump_event(event: Event) -> str:
    """Serialize an event as one compact JSONL line (no trailing newline)."""
    return _ENCODER.encode(event)
