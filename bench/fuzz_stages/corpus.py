"""Malformed input by construction, from a ``random.Random``: what the fuzz tests (through
hypothesis's ``st.randoms()``) and the real-worker fuzz run (a seeded Random) feed ingestion.

Every builder returns a line that schema v1 must refuse — so a test can demand an exact
rejected count, not "some" — and each names the mistake it makes, the way a broken trainer,
a bad agent or an attacker would make it.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

Line = str | bytes
Builder = Callable[[random.Random], Line]

JUNK_VALUES: tuple[Any, ...] = (None, True, False, -1, 0, 2**64, -(2**70), 1.5, "", "x" * 300,
                                "\x00", "\ud800", [], [1, 2], {}, {"a": {"b": []}}, "NaN",
                                float("inf"), float("nan"), "1e309", "2026-01-01")


#: Valid events' times: the last 20 days, inside the ingestion window (issue 40) and the
#: partition window alike, however long the suite runs.
RECENT = (time.time() - 20 * 86400, time.time() - 3600)
#: Times outside the ingestion window whatever its settings (the test settings open its lower
#: bound to the epoch): issue 40's triggers, before the epoch, and past now + 1 day.
OUT_OF_WINDOW = (1e18, -1e18, -1.0, 4102444800.0, 1.7976931348623157e308, -5e-324)


def valid_span(rng: random.Random, job: str = "fuzz") -> dict[str, Any]:
    start = rng.uniform(*RECENT)
    return {"v": 1, "id": uuid.UUID(int=rng.getrandbits(128)).hex, "job": job,
            "attempt": rng.randint(0, 5), "kind": "span", "phase": "compile",
            "start": start, "end": start + rng.uniform(0, 100)}


def valid_mark(rng: random.Random, job: str = "fuzz") -> dict[str, Any]:
    return {"v": 1, "id": uuid.UUID(int=rng.getrandbits(128)).hex, "job": job,
            "attempt": rng.randint(0, 5), "kind": "mark", "mark": "heartbeat",
            "ts": rng.uniform(*RECENT), "step": rng.randint(0, 10**6)}


def _event(rng: random.Random) -> dict[str, Any]:
    return valid_span(rng) if rng.random() < 0.5 else valid_mark(rng)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=True)


def not_json(rng: random.Random) -> Line:
    text = _dumps(_event(rng))
    cut = rng.randint(1, len(text) - 1)
    return rng.choice([text[:cut], "\x01" + text, text.replace(":", "=", 1), "{" * 3,
                       "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(1, 40)))
                       + "{"])


def not_an_object(rng: random.Random) -> Line:
    return _dumps(rng.choice([[_event(rng)], 7, "event", None, True, [], 1.5]))


def missing_field(rng: random.Random) -> Line:
    event = _event(rng)
    required = ["v", "id", "job", "attempt", "kind"] + (
        ["phase", "start", "end"] if event["kind"] == "span" else ["mark", "ts"])
    del event[rng.choice(required)]
    return _dumps(event)


#: Values each field refuses (a value the schema accepts would make the line valid).
BAD_VALUES: dict[str, tuple[Any, ...]] = {
    "v": (0, 2, "1", 1.0, True, None, []),
    "id": ("", "i" * 65, 7, None, ["a"]),
    "job": ("", "j" * 201, 3, None, {"a": 1}),
    "attempt": (-1, "0", 1.5, True, None, 2**64),
    "kind": ("spam", "", None, 1, ["span"]),
    "rank": (-1, "0", 1.5, None),
    "host": (7, "h" * 201, None),
    "step": (-5, "3", 2.5, None),
    "blocking": (1, "yes", None),
    "attrs": ("a", [1], 5, None),
}
SPAN_BAD: dict[str, tuple[Any, ...]] = {
    "phase": ("", "Compile", "1abc", "a" * 65, "a b", None, 3),
    "start": ("now", None, [], True, float("inf"), float("nan")),
    "end": ("later", None, {}, float("-inf")),
}
MARK_BAD: dict[str, tuple[Any, ...]] = {
    "mark": ("attempt_begin", "", None, 1, ["heartbeat"]),
    "ts": ("t", None, True, float("nan"), [1.0]),
}


def wrong_value(rng: random.Random) -> Line:
    event = _event(rng)
    table = {**BAD_VALUES, **(SPAN_BAD if event["kind"] == "span" else MARK_BAD)}
    name = rng.choice(sorted(table))
    event[name] = rng.choice(table[name])
    return _dumps(event)


def unknown_field(rng: random.Random) -> Line:
    event = _event(rng)
    event[rng.choice(["extra", "Job", "ID", "", "\x00", "attempts", "spam" * 10])] = rng.choice(
        JUNK_VALUES)
    return _dumps(event)


def broken_span(rng: random.Random) -> Line:
    span = valid_span(rng)
    choice = rng.randrange(4)
    if choice == 0:
        span["end"] = span["start"] - rng.uniform(0.001, 1e6)  # end before start
    elif choice == 1:
        span["end"] = span["start"] + 31 * 86400  # longer than 30 days
    elif choice == 2:
        span.update(phase="train")  # train without steps
    else:
        span.update(step_start=10, step_end=rng.randint(0, 9))  # steps backwards
    return _dumps(span)


def broken_mark(rng: random.Random) -> Line:
    mark = valid_mark(rng)
    if rng.random() < 0.5:
        mark.update(mark="attempt_end", attrs=rng.choice([{}, {"status": "exploded"},
                                                          {"status": 1}]))
    else:
        mark.update(mark="attempt_start", attrs={"gpus": rng.choice([0, -1, "8", 1.5, None])})
    return _dumps(mark)


def storage_trap(rng: random.Random) -> Line:
    """Valid to the schema's eye, refused by Postgres unless caught: NUL, lone surrogates,
    integers past bigint."""
    event = _event(rng)
    trap = rng.randrange(3)
    if trap == 0:
        event["job"] = "job\x00" + str(rng.random())
    elif trap == 1:
        event["host"] = "\ud800host"
    else:
        event["rank"] = 2**63 + rng.randint(0, 10**6)
    return _dumps(event)


def out_of_window(rng: random.Random) -> Line:
    """A time outside the ingestion window (issue 40: one heartbeat at ts=1e18 ran the
    refresh out of memory), in the kind's own field or in a time field a mark may carry."""
    event = _event(rng)
    value = rng.choice((*OUT_OF_WINDOW, time.time() + 2 * 86400 + rng.uniform(0, 1e9)))
    if event["kind"] == "mark":
        event[rng.choice(["ts", "ts", "start", "end"])] = value
    elif rng.random() < 0.5:
        event["start"] = event["end"] = value  # a 0-s span out of the window
    else:  # a span that ends past now + 1 day (and is no longer than 30 days)
        event["end"] = time.time() + 86400 + rng.uniform(600, 20 * 86400)
        event["start"] = event["end"] - rng.uniform(0, 9 * 86400)
    return _dumps(event)


def surrogate_text(rng: random.Random) -> Line:
    """A lone surrogate or a NUL (as a JSON escape, as the issue-40 line had it) in a string
    field: the job, the id, the host, an attrs key or value. The job's case once lost the
    whole batch, the quarantine row itself failing to encode."""
    event = _event(rng)
    bad = rng.choice(["\\ud800", "\\udfff", "\\udbff", "\\u0000"])
    field = rng.choice(["job", "id", "host", "attrs_key", "attrs_value"])
    marker = "SURROGATE_MARKER"
    if field == "attrs_key":
        event["attrs"] = {marker: 1}
    elif field == "attrs_value":
        event["attrs"] = {"note": marker}
    else:
        event[field] = f"{field}-{marker}"
    return _dumps(event).replace(marker, f"agentpath-{bad}")


def huge_or_deep(rng: random.Random) -> Line:
    event = _event(rng)
    if rng.random() < 0.5:
        event["attrs"] = {"blob": "x" * (9 * 1024 + rng.randint(0, 10_000))}  # > 8 KiB
        return _dumps(event)
    depth = rng.randint(2_000, 20_000)
    return _dumps(event)[:-1] + ', "attrs": ' + "[" * depth + "]" * depth + "}"


def non_utf8(rng: random.Random) -> Line:
    return rng.choice([b"\xff\xfe" + _dumps(_event(rng)).encode(),
                       _dumps(_event(rng)).encode().replace(b'"v"', b'"\xc3\x28"', 1)])


def bad_spool_record(rng: random.Random) -> Line:
    """A spool record (``json<TAB>crc``) whose checksum does not match its JSON."""
    return f"{_dumps(_event(rng))}\t{rng.getrandbits(32):08x}"


BUILDERS: tuple[Builder, ...] = (not_json, not_an_object, missing_field, wrong_value,
                                 unknown_field, broken_span, broken_mark, storage_trap,
                                 huge_or_deep, non_utf8, bad_spool_record, out_of_window,
                                 surrogate_text)


def malformed_line(rng: random.Random) -> Line:
    return rng.choice(BUILDERS)(rng)


def malformed_batch(rng: random.Random, size: int) -> list[Line]:
    return [malformed_line(rng) for _ in range(size)]
