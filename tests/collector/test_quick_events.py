"""A quick record's line is exactly dump_event's line for the same event, byte for byte: the
event the full route would have built, validated, with its keys in the same order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.quick_events import LineTemplate
from collector.schema import dump_event, validate_event
from tests.examples import examples

TEXT = st.text(st.characters(codec="utf-8"), max_size=30)  # quotes, %, \, controls, non-ASCII
INTS = st.integers(0, 2**70)
TIMES = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
#: What quick_span_ok lets through as attrs: str keys, plain values.
ATTRS = st.none() | st.dictionaries(TEXT, TEXT | st.booleans() | st.none()
                                    | st.integers(-10**15 + 1, 10**15 - 1) | TIMES, max_size=5)
PHASES = st.from_regex(r"[a-z][a-z0-9_.-]{0,63}", fullmatch=True)
EVENT_ID = st.from_regex(r"[0-9a-f]{1,64}", fullmatch=True)


@st.composite
def identities(draw: st.DrawFn) -> dict[str, Any]:
    return {"job": draw(TEXT.filter(bool)), "attempt": draw(INTS), "rank": draw(INTS),
            "host": draw(TEXT)}


def _full_route(identity: dict[str, Any], event_id: str, kind: str,
                fields: dict[str, Any]) -> str:
    """The line the Reporter writes for an event that takes the full checks."""
    event = {"v": 1, "id": event_id, "job": identity["job"], "attempt": identity["attempt"],
             "kind": kind, "rank": identity["rank"], "host": identity["host"], **fields}
    return dump_event(validate_event(event))


@settings(max_examples=examples(500), deadline=None)
@given(identities(), EVENT_ID, PHASES, TIMES, st.floats(0, 1e6), st.booleans(),
       st.none() | st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), ATTRS)
def test_a_span_record_writes_the_line_of_its_event(
        identity: dict[str, Any], event_id: str, phase: str, start: float, length: float,
        blocking: bool, steps: tuple[int, int] | None, attrs: dict[str, Any] | None) -> None:
    end = start + length
    fields: dict[str, Any] = {"phase": phase, "start": start, "end": end}
    first = last = None
    if steps is not None or phase == "train":
        first, last = sorted(steps or (0, 0))
        fields.update(step_start=first, step_end=last)
    fields["blocking"] = blocking
    if attrs is not None:
        fields["attrs"] = attrs
    record = ("span", event_id, phase, start, end, first, last, blocking, attrs or None)
    assert LineTemplate(**identity).line(record) == _full_route(identity, event_id, "span",
                                                                fields)


@settings(max_examples=examples(500), deadline=None)
@given(identities(), EVENT_ID, st.sampled_from(["heartbeat", "attempt_start"]), TIMES,
       st.none() | INTS)
def test_a_mark_record_writes_the_line_of_its_event(
        identity: dict[str, Any], event_id: str, mark: str, ts: float,
        step: int | None) -> None:
    fields: dict[str, Any] = {"mark": mark, "ts": ts}
    if step is not None:
        fields["step"] = step
    record = ("mark", event_id, mark, ts, step)
    assert LineTemplate(**identity).line(record) == _full_route(identity, event_id, "mark",
                                                                fields)
