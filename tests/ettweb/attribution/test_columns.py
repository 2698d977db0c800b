"""A job's spans as columns: what the array path reads must be what the dicts say."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.schema import validate_event
from ettweb.attribution.columns import high_water, span_columns, train_columns
from ettweb.attribution.engine import Event
from tests.examples import examples

EPOCH = 1_700_000_000.0
quarters = st.integers(0, 160).map(lambda q: EPOCH + q / 4)


@st.composite
def attempts(draw: st.DrawFn) -> list[list[Event]]:
    """Spans of a few attempts (some with none), train ones of positive length."""
    found: list[list[Event]] = []
    serial = 0
    for attempt in range(draw(st.integers(1, 3))):
        spans = []
        for _ in range(draw(st.integers(0, 10))):
            start = draw(quarters)
            raw: dict[str, Any] = {
                "v": 1, "id": f"s{serial}", "job": "j", "kind": "span", "attempt": attempt,
                "rank": draw(st.integers(0, 3)), "start": start,
                "end": start + 0.25 + draw(st.integers(0, 40)) / 4,
                "phase": draw(st.sampled_from(["train", "eval", "compile"])),
                "blocking": draw(st.booleans())}
            if raw["phase"] == "train":
                raw["step_start"] = draw(st.integers(0, 60))
                raw["step_end"] = raw["step_start"] + draw(st.integers(0, 20))
            spans.append(validate_event(raw))
            serial += 1
        found.append(spans)
    return found


def _columns(by_attempt: list[list[Event]]) -> Any:
    columns = span_columns([s for spans in by_attempt for s in spans],
                           [len(spans) for spans in by_attempt])
    assert columns is not None
    return columns


@settings(max_examples=examples(200), deadline=None)
@given(attempts())
def test_columns_hold_the_fields(by_attempt: list[list[Event]]) -> None:
    columns = _columns(by_attempt)
    spans = columns.spans
    assert columns.start.tolist() == [s["start"] for s in spans]
    assert columns.end.tolist() == [s["end"] for s in spans]
    assert [columns.names[code] for code in columns.name.tolist()] == [s["phase"] for s in spans]
    assert columns.train.tolist() == [s["phase"] == "train" for s in spans]
    blocking = [s["blocking"] and s["phase"] != "train" for s in spans]
    assert columns.blocking.tolist() == blocking
    assert columns.rank.tolist() == [s["rank"] for s, b in zip(spans, blocking, strict=True) if b]
    firsts, lasts = columns.extents()
    assert firsts == [min((s["start"] for s in a), default=float("inf")) for a in by_attempt]
    assert lasts == [max((s["end"] for s in a), default=float("-inf")) for a in by_attempt]
    window = [(EPOCH + 5.0, EPOCH + 30.0)] * len(by_attempt)
    assert columns.outside([w[0] for w in window], [w[1] for w in window]) == [
        sum(1 for s in a if s["start"] < w[0] or s["end"] > w[1])
        for a, w in zip(by_attempt, window, strict=True)]


@settings(max_examples=examples(200), deadline=None)
@given(attempts())
def test_high_water_finds_the_spans_that_redo_steps(by_attempt: list[list[Event]]) -> None:
    """H of a train span: the largest step_end of the train spans ended by its start."""
    train = train_columns(_columns(by_attempt))
    assert train is not None
    assert train.spans == [s for a in by_attempt for s in a if s["phase"] == "train"]
    assert train.steps_by_attempt() == [[s["step_start"] for s in a if s["phase"] == "train"]
                                        for a in by_attempt]
    found = high_water(train)
    assert found is not None
    redo = list(zip(found[0].tolist(), found[1].tolist(), strict=True))
    expected = []
    for index, span in enumerate(train.spans):
        high = max((o["step_end"] for o in train.spans if o["end"] <= span["start"]),
                   default=0)
        if high > span["step_start"]:
            expected.append((index, high))
    assert redo == expected


def test_what_columns_cannot_hold_is_left_to_the_plain_path() -> None:
    span = {"v": 1, "id": "a", "job": "j", "kind": "span", "attempt": 0, "rank": 0,
            "phase": "train", "start": EPOCH, "end": EPOCH + 1.0, "step_start": 0,
            "step_end": 10}
    assert span_columns([validate_event({**span, "start": 0.0, "end": 1.0})], [1]) is None
    assert span_columns([validate_event({**span, "rank": 2**70, "phase": "eval"})], [1]) is None
    huge = span_columns([validate_event({**span, "step_end": 2**70})], [1])
    assert huge is not None and train_columns(huge) is None
    empty = span_columns([validate_event({**span, "end": EPOCH})], [1])
    assert empty is not None
    train = train_columns(empty)
    assert train is not None and high_water(train) is None  # zero length: the plain walk
