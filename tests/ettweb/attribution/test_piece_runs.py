"""The array path (``columns`` + ``piece_runs``) gives exactly the plain path's numbers.

Every job is attributed twice: with the array path forced on (``ARRAY_MIN_SPANS = 0``)
and switched off; the two results must be the same to the last bit (``repr`` also holds
dict order and float types). Orderly jobs (ranks running phases one after the other and
training the same steps side by side) take the array path; random ones mostly fall back to
the plain sweep, which must be just as exact; the fallbacks are also checked one by one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

import ettweb.attribution.engine as engine
from bench.fleet import fleet_events
from collector.schema import validate_event
from ettweb.attribution.engine import Event, FleetAttribution, JobAttribution
from ettweb.attribution.piece_runs import JobRuns, JobSweep
from tests.ettweb.attribution.test_properties import span_events
from tests.examples import examples

#: Far from zero (a cut at zero is left to the plain sweep), exact in quarter seconds.
EPOCH = 1_700_000_000.0
PHASES = ["compile", "eval", "checkpoint_save", "rendezvous", "productive"]
STATUSES = ["completed", "failed", "preempted", "cancelled"]


@contextmanager
def arrays_from(spans: int, batch_spans: int = engine.ARRAY_BATCH_SPANS) -> Iterator[None]:
    """Attribute jobs of at least ``spans`` spans on arrays, in batches of jobs of about
    ``batch_spans`` spans."""
    saved = engine.ARRAY_MIN_SPANS, engine.ARRAY_BATCH_SPANS
    engine.ARRAY_MIN_SPANS, engine.ARRAY_BATCH_SPANS = spans, batch_spans
    try:
        yield
    finally:
        engine.ARRAY_MIN_SPANS, engine.ARRAY_BATCH_SPANS = saved


@contextmanager
def sweeps_seen() -> Iterator[list[JobRuns | None]]:
    """What the array sweep answered for each job it was asked about."""
    seen: list[JobRuns | None] = []
    real = engine.fleet_runs

    def spy(jobs: list[JobSweep]) -> list[JobRuns | None]:
        found = real(jobs)
        seen.extend(found)
        return found

    engine.fleet_runs = spy
    try:
        yield seen
    finally:
        engine.fleet_runs = real


def both_ways(events: list[Event], batch_spans: int = engine.ARRAY_BATCH_SPANS,
              ) -> tuple[FleetAttribution, FleetAttribution]:
    """The fleet attributed on arrays (in batches of ``batch_spans`` spans) and the plain
    way."""
    with arrays_from(0, batch_spans):
        on_arrays = engine.attribute(events)
    with arrays_from(10**9):
        plain = engine.attribute(events)
    return on_arrays, plain


def job_both_ways(events: list[Event], chunk_s: float | None = None,
                  ) -> tuple[JobAttribution, JobAttribution]:
    with arrays_from(0):
        on_arrays = engine.attribute_job(events, chunk_s=chunk_s)
    with arrays_from(10**9):
        plain = engine.attribute_job(events, chunk_s=chunk_s)
    return on_arrays, plain


def _events(raw: list[dict[str, Any]], job: str = "j") -> list[Event]:
    return [validate_event({"v": 1, "id": f"{job}-{i}", "job": job, **e})
            for i, e in enumerate(raw)]


@st.composite
def orderly_attempt(draw: st.DrawFn, attempt: int, t: float, step: int,
                    ) -> tuple[list[dict[str, Any]], float, int]:
    """One attempt as a trainer writes it: per rank, phases one after another (gaps and
    jitter allowed); then train slices every rank shares (same steps, jittered bounds),
    maybe restarting from an earlier step; background spans over it; marks around it.
    Returns the events, where the attempt ended and the step reached."""
    ranks = draw(st.integers(1, 4))
    quarter = st.integers(0, 8).map(lambda q: q / 4)
    raw: list[dict[str, Any]] = [{"kind": "mark", "attempt": attempt, "mark": "attempt_start",
                                  "ts": t, "attrs": {"gpus": draw(st.integers(1, 8))}}]
    for phase in draw(st.lists(st.sampled_from(PHASES), max_size=3)):
        ends = []
        for rank in range(ranks):
            start = t + draw(quarter)
            end = start + 0.25 + draw(quarter)
            raw.append({"kind": "span", "attempt": attempt, "phase": phase, "rank": rank,
                        "start": start, "end": end})
            ends.append(end)
        t = max(ends) + draw(quarter)
    step = draw(st.integers(0, step))  # a restart may resume before the last step
    for _ in range(draw(st.integers(0, 4))):
        steps = draw(st.integers(0, 30))
        length = 1.0 + draw(quarter)
        for rank in range(ranks):
            start = t + draw(quarter)
            raw.append({"kind": "span", "attempt": attempt, "phase": "train", "rank": rank,
                        "start": start, "end": start + length, "step_start": step,
                        "step_end": step + steps})
        t += length + 2.0
        step += steps
        if draw(st.booleans()):
            raw.append({"kind": "span", "attempt": attempt, "phase": "publish", "rank": 0,
                        "start": t - 3.0, "end": t + draw(quarter) * 8, "blocking": False})
    if draw(st.booleans()):
        raw.append({"kind": "mark", "attempt": attempt, "mark": "heartbeat", "ts": t})
    if draw(st.booleans()):
        end = t + draw(quarter) - 1.0  # an end mark may cut the last spans short
        raw.append({"kind": "mark", "attempt": attempt, "mark": "attempt_end", "ts": end,
                    "attrs": {"status": draw(st.sampled_from(STATUSES))}})
    return raw, t, step


@st.composite
def orderly_jobs(draw: st.DrawFn, job: str = "j") -> list[Event]:
    raw: list[dict[str, Any]] = []
    t, step = EPOCH + draw(st.integers(0, 400)) / 4, 0
    for attempt in range(draw(st.integers(1, 3))):
        events, t, step = draw(orderly_attempt(attempt, t, step))
        raw += events
        t += draw(st.integers(0, 8)) / 4  # a restart gap, maybe none
    return _events(raw, job)


@st.composite
def random_jobs(draw: st.DrawFn, job: str = "j") -> list[Event]:
    """The property tests' random timelines (overlaps, nesting, clamping), moved off zero."""
    raw: list[dict[str, Any]] = []
    for attempt in range(draw(st.integers(1, 3))):
        for span in draw(st.lists(span_events(attempt), max_size=12)):
            raw.append({**span, "start": EPOCH + span["start"], "end": EPOCH + span["end"]})
        for _ in range(draw(st.integers(1, 3))):
            mark = draw(st.sampled_from(["attempt_start", "attempt_end", "heartbeat"]))
            attrs = ({"status": draw(st.sampled_from(STATUSES))} if mark == "attempt_end"
                     else {})
            raw.append({"kind": "mark", "attempt": attempt, "mark": mark,
                        "ts": EPOCH + draw(st.integers(0, 160)) / 4, "attrs": attrs})
    return _events(raw, job)


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(orderly_jobs(), random_jobs()))
def test_a_job_on_arrays_is_the_plain_sweep(events: list[Event]) -> None:
    with sweeps_seen() as seen:
        on_arrays, plain = job_both_ways(events)
    event("swept on arrays" if seen and seen[0] is not None else "swept the plain way")
    assert repr(on_arrays) == repr(plain)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(orderly_jobs(), random_jobs()), min_size=1, max_size=6),
       st.sampled_from([1, 40, engine.ARRAY_BATCH_SPANS]))
def test_a_fleet_on_arrays_is_the_plain_sweep(jobs: list[list[Event]],
                                              batch_spans: int) -> None:
    """Jobs swept together on arrays (some taken, some falling back), in batches of one
    job to all of them, stay apart."""
    fleet = [e for index, events in enumerate(jobs)
             for e in (dict(e, job=f"job-{index}", id=f"{index}:{e['id']}") for e in events)]
    on_arrays, plain = both_ways(fleet, batch_spans)
    assert repr(on_arrays) == repr(plain)


@settings(max_examples=examples(100), deadline=None)
@given(orderly_jobs(), st.sampled_from([1.0, 3.75, 60.0]))
def test_chunked_sweeps_keep_their_numbers(events: list[Event], chunk_s: float) -> None:
    """Chunked attribution sweeps the plain way, from the array path's splits."""
    on_arrays, plain = job_both_ways(events, chunk_s)
    assert repr(on_arrays) == repr(plain)


def test_orderly_jobs_take_the_array_sweep() -> None:
    """The synthetic fleet is the orderly kind: every job is swept on arrays."""
    events = list(fleet_events(7, 12, min_ranks=2, max_ranks=6))
    with sweeps_seen() as seen:
        on_arrays, plain = both_ways(events, batch_spans=1000)  # a few batches
    assert len(seen) == 12 and all(found is not None for found in seen)
    assert repr(on_arrays) == repr(plain)


def _span(rank: int, phase: str, start: float, end: float, **extra: Any) -> dict[str, Any]:
    return {"kind": "span", "attempt": 0, "rank": rank, "phase": phase,
            "start": EPOCH + start, "end": EPOCH + end, **extra}


def _fallback(raw: list[dict[str, Any]]) -> bool:
    """Whether the array sweep left the job to the plain sweep (and both agree)."""
    events = _events(raw)
    with sweeps_seen() as seen:
        on_arrays, plain = job_both_ways(events)
    assert repr(on_arrays) == repr(plain)
    return not seen or seen[0] is None


def test_nested_blocking_spans_of_a_rank_fall_back() -> None:
    assert _fallback([_span(0, "checkpoint_save", 0, 10), _span(0, "upload", 2, 5)])
    assert not _fallback([_span(0, "checkpoint_save", 0, 10), _span(1, "upload", 2, 5)])


def test_ranks_training_different_steps_at_once_fall_back() -> None:
    first = [_span(0, "train", 0, 10, step_start=0, step_end=10),
             _span(0, "train", 10, 20, step_start=10, step_end=20)]
    assert not _fallback([*first, _span(1, "train", 10.5, 19, step_start=10, step_end=20)])
    assert _fallback([*first, _span(1, "train", 10.5, 19, step_start=5, step_end=20)])


def test_times_at_zero_and_many_phase_names_fall_back() -> None:
    assert _fallback([{**_span(0, "compile", 0, 5), "start": 0.0, "end": 5.0}])
    many = [_span(0, f"phase{i}", i, i + 0.5) for i in range(60)]
    assert _fallback(many)
    assert not _fallback(many[:40])
