"""The worker parses plain lines with orjson: it must accept, reject and normalize exactly as
the standard-library path does, value for value and type for type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector import schema
from collector.schema import EventError, is_plain, parse_event, validate_event
from tests.examples import examples

pytestmark = pytest.mark.skipif(schema._fast_loads is None, reason="orjson is part of the "
                                "web/worker install; this file tests its fast path")

JSON_SCALARS = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["span", "mark"]))
    event: dict[str, Any] = {
        "v": 1, "id": draw(st.text(min_size=1, max_size=20)),
        "job": draw(st.text(min_size=1, max_size=20)),
        "attempt": draw(st.integers(min_value=0, max_value=2**70)), "kind": kind,
        "rank": draw(st.integers(min_value=0, max_value=2**66)),
        "attrs": draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)),
    }
    if kind == "span":
        start = draw(st.floats(min_value=0, max_value=2e9))
        event.update(phase="compile", start=start, end=start + draw(st.floats(0, 1e5)))
    else:
        event.update(mark="heartbeat", ts=draw(st.integers(0, 2**64) | st.floats(0, 2e9)))
    return event


def _exact(line: str) -> dict[str, Any] | str:
    try:
        return validate_event(json.loads(line))
    except (ValueError, EventError) as exc:
        return f"rejected: {type(exc).__name__}"


def _parsed(line: str) -> dict[str, Any] | str:
    try:
        return parse_event(line)
    except (ValueError, EventError) as exc:
        return f"rejected: {type(exc).__name__}"


@settings(max_examples=examples(400), deadline=None)
@given(events(), st.booleans())
def test_fast_and_standard_parsers_agree_value_for_value(event: dict[str, Any],
                                                         ascii_only: bool) -> None:
    line = json.dumps(event, ensure_ascii=ascii_only, separators=(",", ":"))
    # repr() tells 1 from 1.0 and keeps key order: equal reprs mean identical events.
    assert repr(_parsed(line)) == repr(_exact(line))


def test_what_is_not_plain() -> None:
    plain = '{"v":1,"id":"a","job":"j","attempt":0,"kind":"mark","mark":"heartbeat","ts":1.5}'
    assert is_plain(plain) and is_plain(plain.encode())
    assert not is_plain(plain.replace('"j"', '"j\\u0000"'))  # NUL escape
    assert not is_plain(plain.replace('"j"', '"é"'))  # non-ASCII
    assert not is_plain(plain.replace("1.5", "NaN"))
    assert not is_plain(plain.replace("1.5", "18446744073709551616"))  # past 64 bits
    assert is_plain(plain.replace("1.5", "1736697081.9264235"))  # a timestamp is fine


def test_a_big_integer_keeps_its_exact_value() -> None:
    line = ('{"v":1,"id":"a","job":"j","attempt":0,"kind":"mark","mark":"heartbeat","ts":1,'
            '"attrs":{"n":123456789012345678901234567890}}')
    assert parse_event(line)["attrs"]["n"] == 123456789012345678901234567890


def test_bad_json_is_worded_by_the_standard_parser() -> None:
    with pytest.raises(EventError, match=r"^bad JSON: Expecting"):
        parse_event('{"v":1,')
