"""validate_event's common route (no attrs, plain fields) must accept, reject and normalize
exactly as the full checks do: the full checks, with the common route switched off, are the
oracle, over generated events both valid and broken."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector import schema
from collector.schema import EventError, validate_event
from tests.examples import examples

ANY_VALUE = (st.none() | st.booleans() | st.integers(-3, 2**40) | st.text(max_size=70)
             | st.floats(allow_nan=True, allow_infinity=True) | st.lists(st.integers(), max_size=2)
             | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
PHASES = st.sampled_from(["train", "compile", "checkpoint_save", "Bad Phase", "", "x" * 70])
MARKS = st.sampled_from(["heartbeat", "attempt_start", "attempt_end", "bogus"])


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["span", "mark", "other"]))
    event: dict[str, Any] = {"v": 1, "id": "e1", "job": "j", "attempt": 0, "kind": kind}
    if kind == "span":
        start = draw(st.floats(0, 2e9) | st.integers(0, 2**31))
        event.update(phase=draw(PHASES), start=start,
                     end=start + draw(st.floats(0, 4e6) | st.integers(-5, 10)))
        if draw(st.booleans()):
            event.update(step_start=draw(st.integers(-1, 50)), step_end=draw(st.integers(0, 60)))
    else:
        event.update(mark=draw(MARKS), ts=draw(st.floats(0, 2e9)))
    for name in ("rank", "host", "step", "blocking", "attrs"):
        if draw(st.integers(0, 3)) == 0:
            event[name] = draw(ANY_VALUE)
    # break one field in a third of the events: a wrong type, a bad value, or a missing one
    if draw(st.integers(0, 2)) == 0:
        name = draw(st.sampled_from(sorted(event)))
        if draw(st.booleans()):
            del event[name]
        else:
            event[name] = draw(ANY_VALUE)
    return event


def _outcome(event: dict[str, Any]) -> str:
    try:
        return repr(validate_event(event))
    except EventError as exc:
        return f"EventError: {exc}"


@settings(max_examples=examples(1500), deadline=None)
@given(events())
def test_common_route_agrees_with_the_full_checks(event: dict[str, Any]) -> None:
    fast = _outcome(dict(event))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "_common_case", lambda _event: False)
        full = _outcome(dict(event))
    assert fast == full


def test_the_common_route_is_taken_for_a_plain_event() -> None:
    taken: list[bool] = []
    real = schema._common_case

    def spy(event: dict[str, Any]) -> bool:
        taken.append(real(event))
        return taken[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "_common_case", spy)
        validate_event({"v": 1, "id": "a", "job": "j", "attempt": 0, "kind": "span",
                        "phase": "train", "start": 1.0, "end": 2, "step_start": 0,
                        "step_end": 10})
    assert taken == [True]


@pytest.mark.parametrize(("fields", "reason"), [
    ({"mark": [], "ts": 1.0}, "unknown mark []"),
    ({"mark": "attempt_end", "ts": 1.0, "attrs": {"status": ["failed"]}},
     "attempt_end needs 'attrs.status'"),
])
def test_unhashable_values_are_event_errors_not_crashes(fields: dict[str, Any],
                                                        reason: str) -> None:
    """Found by the test above: a list where a name belongs raised TypeError, which the
    worker would not have quarantined with a reason."""
    with pytest.raises(EventError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        validate_event({"v": 1, "id": "a", "job": "j", "attempt": 0, "kind": "mark", **fields})
