"""The Reporter's quick route (check_identity, quick_span_ok, quick_mark_ok) accepts only what
validate_event accepts, and only values it would leave as they are: the full checks are the
oracle, over generated values both valid and broken."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.schema import (
    MAX_SPAN_S,
    EventError,
    check_identity,
    quick_mark_ok,
    quick_span_ok,
    validate_event,
)
from tests.examples import examples

ANY_VALUE = (st.none() | st.booleans() | st.integers(-3, 2**70) | st.text(max_size=4)
             | st.floats(allow_nan=True, allow_infinity=True) | st.lists(st.integers(), max_size=2)
             | st.sampled_from(["train", "Bad Phase", "heartbeat", "attempt_end"]))
IDENTITY = {"v": 1, "id": "e1", "job": "j", "attempt": 0, "rank": 0, "host": "node-1"}


def _outcome(event: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return validate_event(event)
    except EventError:
        return None


def _break_one(draw: st.DrawFn, values: dict[str, Any], required: tuple[str, ...]) -> None:
    """In a third of the draws: a wrong type or value, a missing or an unexpected field."""
    if draw(st.integers(0, 2)):
        return
    name = draw(st.sampled_from([*sorted(values), "attrs", "rank", "step", "blocking"]))
    if name in required or draw(st.booleans()):
        values[name] = draw(ANY_VALUE)
    else:
        values.pop(name, None)


PLAIN_VALUES = (st.text(max_size=40) | st.booleans() | st.none()
                | st.integers(-10**15 + 1, 10**15 - 1)
                | st.floats(allow_nan=False, allow_infinity=False))
#: Values the quick check must refuse or size right: not JSON, too long a number, nested, or
#: a string that escapes to 12 bytes a character (astral plane), about the 8 KiB limit.
ODD_VALUES = st.one_of(
    st.sampled_from([10**15, -10**15, 2**70, math.nan, math.inf, -math.inf, [1], {"a": 1},
                     {"b": math.nan}, b"bytes", 1j]),
    st.text(st.characters(min_codepoint=0x10000), min_size=670, max_size=690))


@st.composite
def attrs(draw: st.DrawFn) -> dict[Any, Any]:
    """What hooks attach (a few short strings and numbers), one odd entry in half of them."""
    values = draw(st.dictionaries(st.text(max_size=20), PLAIN_VALUES, max_size=6))
    if draw(st.booleans()):
        key = draw(st.sampled_from(["odd", "", 1, None]))
        values[key] = draw(ODD_VALUES)
    return values


@st.composite
def spans(draw: st.DrawFn) -> dict[str, Any]:
    """What a trainer passes to ``span`` (often near the 30-day limit), one field broken in
    a third of them."""
    phase = draw(st.sampled_from(["train", "compile", "checkpoint_save"]))
    start = draw(st.floats(-1e12, 1e12))
    delta = draw(st.sampled_from([0.0, 1.0, -1.0, MAX_SPAN_S, MAX_SPAN_S + 1.0, math.inf])
                 | st.floats(0, 1e6))
    values: dict[str, Any] = {"phase": phase, "start": start, "end": start + delta}
    if draw(st.booleans()):
        values["blocking"] = draw(st.booleans())
    if phase == "train" or draw(st.booleans()):
        values["step_start"] = draw(st.integers(-2, 60))
        values["step_end"] = draw(st.integers(-2, 60))
    if draw(st.booleans()):
        values["attrs"] = draw(attrs())
    _break_one(draw, values, ("phase", "start", "end"))
    return values


@st.composite
def marks(draw: st.DrawFn) -> dict[str, Any]:
    values: dict[str, Any] = {
        "mark": draw(st.sampled_from(["heartbeat", "attempt_start", "attempt_end"])),
        "ts": draw(st.floats(-1e12, 1e12) | st.sampled_from([math.inf, math.nan]))}
    if draw(st.booleans()):
        values["step"] = draw(st.integers(-2, 60))
    _break_one(draw, values, ("mark", "ts"))
    return values


@settings(max_examples=examples(1500), deadline=None)
@given(spans())
def test_a_quick_span_is_one_the_full_checks_accept_unchanged(values: dict[str, Any]) -> None:
    event = {**IDENTITY, "kind": "span", **values}
    phase, start, end = values.pop("phase"), values.pop("start"), values.pop("end")
    if not quick_span_ok(phase, start, end, values):
        return
    valid = _outcome(dict(event))
    assert valid is not None
    assert valid == {**event, "blocking": values.get("blocking", True),
                     "attrs": values.get("attrs", {})}
    assert type(valid["start"]) is type(start) and type(valid["end"]) is type(end)


@settings(max_examples=examples(1000), deadline=None)
@given(marks())
def test_a_quick_mark_is_one_the_full_checks_accept_unchanged(values: dict[str, Any]) -> None:
    event = {**IDENTITY, "kind": "mark", **values}
    mark, ts = values.pop("mark"), values.pop("ts")
    if not quick_mark_ok(mark, ts, values):
        return
    valid = _outcome(dict(event))
    assert valid == {**event, "blocking": True, "attrs": {}}
    assert type(valid["ts"]) is float


@settings(max_examples=examples(1000), deadline=None)
@given(ANY_VALUE | st.text(max_size=210), ANY_VALUE, ANY_VALUE,
       ANY_VALUE | st.text(max_size=210))
def test_check_identity_agrees_with_the_full_checks(job: Any, attempt: Any, rank: Any,
                                                    host: Any) -> None:
    event = {**IDENTITY, "kind": "mark", "mark": "heartbeat", "ts": 1.0, "job": job,
             "attempt": attempt, "rank": rank, "host": host}
    try:
        check_identity(job, attempt, rank, host)
    except EventError:
        assert _outcome(event) is None
    else:
        assert _outcome(event) is not None


@pytest.mark.parametrize(("phase", "start", "end", "fields"), [
    ("checkpoint_save", 10.0, 10.5, {"blocking": False}),
    ("train", 10.0, 70.0, {"step_start": 0, "step_end": 600}),
    ("compile", 10.0, 10.0, {}),
    ("checkpoint_save", 10.0, 10.5, {"blocking": False, "attrs": {
        "api": "dcp.async_save", "stage": "upload", "bytes": 2**40, "ratio": 0.5,
        "ok": True, "error": None}}),
    ("eval", 1.0, 2.0, {"attrs": {"note": "é" * 678}}),  # 8,192 bytes, were each escaped 12
])
def test_what_a_trainer_emits_takes_the_quick_route(phase: str, start: float, end: float,
                                                    fields: dict[str, Any]) -> None:
    assert quick_span_ok(phase, start, end, fields)


@pytest.mark.parametrize(("phase", "start", "end", "fields"), [
    ("eval", 1, 2.0, {}),  # an int time: normalized to a float by the full checks
    ("eval", 1.0, 2.0, {"attrs": {"nested": {"a": 1}}}),
    ("eval", 1.0, 2.0, {"attrs": {1: "a"}}),  # the encoder makes the key a string
    ("eval", 1.0, 2.0, {"attrs": {"n": 10**15}}),
    ("eval", 1.0, 2.0, {"attrs": {"x": float("nan")}}),
    ("eval", 1.0, 2.0, {"attrs": {"note": "é" * 679}}),  # one more: the bound passes 8 KiB
    ("eval", 1.0, 2.0, {"attrs": []}),
    ("train", 1.0, 2.0, {}),  # no steps: invalid
    ("eval", float("-inf"), 2.0, {}),
    ("eval", 2.0, float("inf"), {}),
    ("eval", float("nan"), float("nan"), {}),
    ("eval", 1.0, 2.0, {"blocking": 1}),
    ("eval", 1.0, 2.0, {"step_start": 3}),
])
def test_anything_else_takes_the_full_checks(phase: str, start: Any, end: Any,
                                             fields: dict[str, Any]) -> None:
    assert not quick_span_ok(phase, start, end, fields)


def test_marks_take_the_quick_route_but_attempt_end() -> None:
    assert quick_mark_ok("heartbeat", 5.0, {"step": 7})
    assert quick_mark_ok("attempt_start", 5.0, {})
    assert not quick_mark_ok("attempt_end", 5.0, {})
    assert not quick_mark_ok("heartbeat", 5, {})
    assert not quick_mark_ok("heartbeat", float("inf"), {})
    assert not quick_mark_ok("heartbeat", 5.0, {"step": -1})
