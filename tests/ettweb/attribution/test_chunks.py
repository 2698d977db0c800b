"""The chunked attribution equals the whole-job engine, however the events arrive (issue 15).

Two properties: a job attributed chunk by chunk from nothing gives the engine's numbers, and
a job whose events arrive in random batches, in random order, each batch refreshing only
the chunks it touched from what the earlier refreshes stored (through JSON, as Postgres
keeps it), ends — and passes every step — with the engine's numbers over the events so far.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.schema import validate_event
from ettweb.attribution.chunk_refresh import refresh
from ettweb.attribution.chunk_summary import check_chunk_s, chunk_of, home_of, home_time
from ettweb.attribution.chunk_sums import Assembled, assemble, attribute_in_chunks, day_values
from ettweb.attribution.chunk_sweep import ChunkState, segments_from_json, segments_to_json
from ettweb.attribution.engine import Event, attribute_job
from ettweb.attribution.implied import BACKWARDS, implied_in_job
from tests.ettweb.attribution.test_properties import job_events
from tests.examples import examples

#: Chunk lengths that divide a day, against timelines of quarter seconds to days.
CHUNKS = [0.25, 1.0, 3.75, 10.0, 40.0, 3600.0, 86400.0]


@st.composite
def stretched_jobs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], float]:
    """The property tests' timelines, stretched (x1 to x5400: up to 2.5 days) and moved
    next to a UTC midnight, so chunks and days cut them everywhere; and a chunk length
    that cuts the job into at most a few hundred chunks (a span open across chunks is
    carried through each)."""
    scale = draw(st.sampled_from([1.0, 7.5, 900.0, 5400.0]))
    chunk_s = draw(st.sampled_from([c for c in CHUNKS if 80 * scale / c <= 400]))
    offset = 20 * 86400.0 - draw(st.sampled_from([0.0, 3600.0, 30.0]))
    events = []
    for event in draw(job_events()):
        raw = {k: v for k, v in event.items()}
        for key in ("start", "end", "ts"):
            if key in raw:
                raw[key] = offset + raw[key] * scale
        events.append(validate_event(raw))
    return events, chunk_s


def _close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-9, abs=1e-6)


def _same_map(a: dict[Any, float], b: dict[Any, float]) -> bool:
    keys = {k for k in {**a, **b} if abs(a.get(k, 0.0)) > 1e-6 or abs(b.get(k, 0.0)) > 1e-6}
    return all(_close(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)


def assert_equal_to_engine(got: Assembled, events: list[Event]) -> None:
    """Every number of the job, every day x category and every recovery, as the engine."""
    whole = attribute_job(events)
    mine = got.attribution
    assert mine.attempts == whole.attempts
    assert _close(mine.wall_s, whole.wall_s)
    assert _close(mine.productive_s, whole.productive_s)
    assert _close(mine.wall_gpu_s, whole.wall_gpu_s)
    assert _close(mine.productive_gpu_s, whole.productive_gpu_s)
    assert _same_map(mine.lost_s, whole.lost_s)
    assert _same_map(mine.lost_gpu_s, whole.lost_gpu_s)
    days = day_values(whole)
    for index in (0, 1):
        assert _same_map({k: v[index] for k, v in got.days.items()},
                         {k: v[index] for k, v in days.items()})
    assert (mine.repeated_steps, mine.repeated_steps_by_attempt, mine.failures,
            mine.time_to_start_s, mine.anomalies) == (
        whole.repeated_steps, whole.repeated_steps_by_attempt, whole.failures,
        whole.time_to_start_s, whole.anomalies)
    assert mine.time_to_recover_s == whole.time_to_recover_s
    for m, w in zip(mine.recoveries, whole.recoveries, strict=True):
        assert (m.attempt, m.start, m.end) == (w.attempt, w.start, w.end)
        assert _same_map(m.by_category, w.by_category)
        assert _same_map(m.by_category_gpu_s, w.by_category_gpu_s)


@settings(max_examples=examples(400), deadline=None)
@given(stretched_jobs(), st.sampled_from([1, 3, 20_000]))
def test_chunk_by_chunk_from_nothing_is_the_engine(job: tuple[list[Event], float],
                                                   group_events: int) -> None:
    """Whatever the chunks' sizes: one fine chunk each (``group_events`` 1), a few, or the
    whole of a day's events."""
    events, chunk_s = job
    assert_equal_to_engine(attribute_in_chunks(events, chunk_s, group_events), events)


class _Store:
    """What the database keeps of one job's chunks, kept here through JSON."""

    def __init__(self, chunk_s: float, group_events: int = 20_000) -> None:
        self.chunk_s, self.group_events = chunk_s, group_events
        self.events: dict[int, list[Event]] = {}
        self.rows: dict[int, dict[str, str]] = {}
        #: §3 rule 3's spans as the database keeps them (``rollups.implied_store``):
        #: one more home event of the chunk each starts in, re-derived after each batch.
        self.implied: list[Event] = []
        self.backwards = 0

    def add(self, batch: list[Event]) -> set[int]:
        dirty = set()
        for event in batch:
            k = chunk_of(home_time(event), self.chunk_s)
            self.events.setdefault(k, []).append(json.loads(json.dumps(event)))
            dirty.add(k)
        reported = [e for events in self.events.values() for e in events]
        implied, self.backwards = implied_in_job("j", reported)
        for span in {json.dumps(s, sort_keys=True) for s in self.implied} ^ {
                json.dumps(s, sort_keys=True) for s in implied}:
            dirty.add(chunk_of(json.loads(span)["start"], self.chunk_s))
        self.implied = implied
        return dirty

    def home(self, k: int, following: int | None) -> list[Event]:
        end = float("inf") if following is None else following * self.chunk_s
        return home_of(self.events, k, following) + [
            s for s in self.implied if k * self.chunk_s <= s["start"] < end]

    def write(self, state: ChunkState) -> None:
        self.rows[state.chunk] = {
            "summary": json.dumps(state.summary_json()), "state": json.dumps(state.state_json()),
            "carry": json.dumps(state.carry), "segments": json.dumps(
                segments_to_json(state.segments or []))}

    def stored(self) -> dict[int, ChunkState]:
        return {k: ChunkState.from_json(k, json.loads(row["summary"]), json.loads(row["state"]))
                for k, row in self.rows.items()}

    def refresh(self, dirty: set[int]) -> tuple[Assembled | None, list[int]]:
        done = refresh(dirty, self.stored(), self.home,
                       lambda k: json.loads(self.rows[k]["carry"]),
                       lambda fines: {f: len(self.events.get(f, [])) for f in fines},
                       self.chunk_s, write=self.write, with_lanes=False, cached_events=3,
                       group_events=self.group_events)
        for k in done.deleted:
            del self.rows[k]
        if done.skeleton is None:
            return None, done.written
        return assemble("j", done.skeleton, done.states, lambda ks: {
            k: segments_from_json(json.loads(self.rows[k]["segments"])) for k in ks},
            self.chunk_s, extra_anomalies={BACKWARDS: self.backwards} if self.backwards
            else None), done.written


@settings(max_examples=examples(300), deadline=None)
@given(stretched_jobs(), st.sampled_from([1, 3, 20_000]), st.randoms(use_true_random=False))
def test_batches_in_any_order_refresh_to_the_engines_numbers(
        job: tuple[list[Event], float], group_events: int, rng: random.Random) -> None:
    """Random batches, shuffled (late ones included); after each, the refresh of only the
    chunks it touched equals the engine over every event so far."""
    events, chunk_s = job
    check_chunk_s(chunk_s)
    _refresh_in_shuffled_batches(events, chunk_s, group_events, rng, largest=4)


def _refresh_in_shuffled_batches(events: list[Event], chunk_s: float, group_events: int,
                                 rng: random.Random, largest: int) -> None:
    """Store ``events`` shuffled, in batches of 1 to ``largest``, refreshing only what each
    batch touched; after each, the numbers equal the engine over every event so far."""
    shuffled = events[:]
    rng.shuffle(shuffled)
    store = _Store(chunk_s, group_events)
    seen: list[Event] = []
    while shuffled:
        size = rng.randint(1, largest)
        batch, shuffled = shuffled[:size], shuffled[size:]
        seen += batch
        got, _ = store.refresh(store.add(batch))
        assert got is not None
        assert_equal_to_engine(got, seen)


def _steady_job(minutes: int, ranks: int = 2) -> list[Event]:
    """One attempt training in one-minute slices per rank, after a compile."""
    t0 = 30 * 86400.0
    raw: list[dict[str, Any]] = [
        {"id": "s", "kind": "mark", "mark": "attempt_start", "ts": t0, "attempt": 0,
         "attrs": {"gpus": 8}},
        {"id": "c", "kind": "span", "phase": "compile", "start": t0, "end": t0 + 90.0,
         "attempt": 0}]
    for minute in range(minutes):
        for rank in range(ranks):
            start = t0 + 90.0 + 60.0 * minute
            raw.append({"id": f"t{minute}-{rank}", "kind": "span", "phase": "train",
                        "start": start, "end": start + 60.0, "rank": rank, "attempt": 0,
                        "step_start": 10 * minute, "step_end": 10 * minute + 10})
    return [validate_event({"v": 1, "job": "j", **event}) for event in raw]


def test_a_new_minute_recomputes_only_the_chunk_it_lands_in() -> None:
    """The cost of a refresh follows the new events: the live chunk, whatever the job's
    age; the minute that opens a new chunk also recomputes the one before, once (its
    extent now ends where the new one starts)."""
    events = _steady_job(358)  # the last minute starts at 5 h 58 min 30 s
    store = _Store(3600.0, group_events=100)  # a chunk per hour (120 spans an hour)
    store.refresh(store.add(events[:-2]))
    got, written = store.refresh(store.add(events[-2:]))
    assert got is not None
    assert_equal_to_engine(got, events)
    assert written == [chunk_of(home_time(events[-1]), 3600.0)]
    more = _steady_job(360)[len(events):]  # two minutes more: the first opens hour 6
    got, written = store.refresh(store.add(more))
    assert got is not None
    assert_equal_to_engine(got, [*events, *more])
    assert written == [chunk_of(home_time(events[-1]), 3600.0), chunk_of(home_time(more[-1]),
                                                                          3600.0)]


def test_a_late_event_days_back_recomputes_what_it_changes() -> None:
    """A heartbeat arriving late in an old chunk changes no carry and no window: only its
    chunk is recomputed. A late train span that raises the high-water mark past every step
    recomputes its chunk and every later one (each starts from the mark); one that stays
    below the steps that follow changes no later chunk's mark and recomputes its own."""
    events = _steady_job(6 * 60)
    store = _Store(3600.0, group_events=100)
    store.refresh(store.add(events))
    old = events[5]["start"] + 1.0
    beat = validate_event({"v": 1, "id": "late", "job": "j", "attempt": 0, "kind": "mark",
                           "mark": "heartbeat", "ts": old})
    got, written = store.refresh(store.add([beat]))
    assert got is not None
    assert_equal_to_engine(got, [*events, beat])
    assert written == [chunk_of(old, 3600.0)]
    modest = validate_event({"v": 1, "id": "modest", "job": "j", "attempt": 0, "kind": "span",
                             "phase": "train", "start": old, "end": old + 1.0, "rank": 9,
                             "step_start": 0, "step_end": 20})
    got, written = store.refresh(store.add([modest]))
    assert got is not None
    assert_equal_to_engine(got, [*events, beat, modest])
    assert written == [chunk_of(old, 3600.0)]
    huge = validate_event({"v": 1, "id": "huge", "job": "j", "attempt": 0, "kind": "span",
                           "phase": "train", "start": old, "end": old + 1.0, "rank": 9,
                           "step_start": 0, "step_end": 10**9})
    got, written = store.refresh(store.add([huge]))
    assert got is not None
    assert_equal_to_engine(got, [*events, beat, modest, huge])
    last = chunk_of(home_time(events[-1]), 3600.0)
    assert written == list(range(chunk_of(old, 3600.0), last + 1))
    assert got.attribution.repeated_steps > 0


@st.composite
def hard_killed_jobs(draw: st.DrawFn) -> tuple[list[Event], float]:
    """Jobs whose attempts train in slices per rank, save, heartbeat with their step and
    are killed outright (no attempt_end, the open slice lost), then resume from a saved
    step (§3 rule 3); heartbeats at times and steps drawn freely too, backwards ones
    included. Moved next to a UTC midnight and cut into chunks of a drawn length."""
    chunk_s = draw(st.sampled_from([1.0, 3.75, 10.0, 40.0]))
    t = 20 * 86400.0 - draw(st.sampled_from([0.0, 30.0, 95.0]))
    raw: list[dict[str, Any]] = []
    saved = 0
    for attempt in range(draw(st.integers(1, 3))):
        ranks = draw(st.integers(1, 2))
        raw.append({"kind": "mark", "mark": "attempt_start", "ts": t, "attempt": attempt,
                    "attrs": {"gpus": ranks}})
        step = saved
        for _ in range(draw(st.integers(0, 3))):
            length = draw(st.sampled_from([2.5, 7.0, 30.0]))
            for rank in range(ranks):
                raw.append({"kind": "span", "phase": "train", "start": t, "end": t + length,
                            "rank": rank, "attempt": attempt, "step_start": step,
                            "step_end": step + 10})
            t, step = t + length, step + 10
            if draw(st.booleans()):
                raw.append({"kind": "span", "phase": "checkpoint_save", "start": t,
                            "end": t + 1.5, "attempt": attempt})
                t, saved = t + 1.5, step
        for rank in range(ranks):  # the open slice's heartbeats, then the kill
            for beat in range(draw(st.integers(0, 2))):
                raw.append({"kind": "mark", "mark": "heartbeat", "attempt": attempt,
                            "rank": rank, "ts": t + 2.0 * (beat + 1) + rank,
                            "step": step + draw(st.integers(-3, 8))})
        t += 6.0
        if draw(st.booleans()):
            raw.append({"kind": "mark", "mark": "attempt_end", "ts": t, "attempt": attempt,
                        "attrs": {"status": draw(st.sampled_from(["failed", "completed"]))}})
        t += draw(st.sampled_from([0.0, 4.0, 50.0]))
    events = [validate_event({"v": 1, "id": f"e{i}", "job": "j",
                              **{k: max(v, 0) if k == "step" else v for k, v in e.items()}})
              for i, e in enumerate(raw)]
    return events, chunk_s


@settings(max_examples=examples(200), deadline=None)
@given(hard_killed_jobs(), st.sampled_from([1, 3, 20_000]), st.randoms(use_true_random=False))
def test_hard_kills_in_any_arrival_order_refresh_to_the_engines_numbers(
        job: tuple[list[Event], float], group_events: int, rng: random.Random) -> None:
    """§3 rule 3 chunk by chunk: an implied span may start chunks before the heartbeat
    that implies it, and a later span or heartbeat may move or cancel it."""
    events, chunk_s = job
    assert_equal_to_engine(attribute_in_chunks(events, chunk_s, group_events), events)
    _refresh_in_shuffled_batches(events, chunk_s, group_events, rng, largest=5)
