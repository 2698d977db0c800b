"""A job's chunks start at the same bounds whatever order its events arrived in (issue 31):
refreshed batch by batch, in random order and random batches, a job ends with the chunks one
rebuild from all its events gives, and its numbers stay the engine's."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.schema import validate_event
from ettweb.attribution.chunk_refresh import Refreshed, refresh
from ettweb.attribution.chunk_summary import chunk_of, home_of, home_time
from ettweb.attribution.chunk_sweep import ChunkState
from ettweb.attribution.engine import Event
from tests.ettweb.attribution.test_chunks import stretched_jobs
from tests.examples import examples


class _Chunks:
    """One job's stored chunks (small fields, through JSON as Postgres keeps them) and its
    events by fine chunk."""

    def __init__(self, chunk_s: float, group_events: int) -> None:
        self.chunk_s, self.group_events = chunk_s, group_events
        self.events: dict[int, list[Event]] = {}
        self.rows: dict[int, dict[str, Any]] = {}
        self.carries: dict[int, list[Event]] = {}

    def add(self, batch: list[Event]) -> set[int]:
        dirty = set()
        for event in batch:
            k = chunk_of(home_time(event), self.chunk_s)
            self.events.setdefault(k, []).append(event)
            dirty.add(k)
        return dirty

    def _write(self, state: ChunkState) -> None:
        self.rows[state.chunk] = json.loads(json.dumps(
            {"summary": state.summary_json(), "state": state.state_json()}))
        self.carries[state.chunk] = state.carry or []

    def refresh(self, dirty: set[int]) -> Refreshed:
        stored = {k: ChunkState.from_json(k, row["summary"], row["state"])
                  for k, row in self.rows.items()}
        done = refresh(dirty, stored, lambda k, following: home_of(self.events, k, following),
                       lambda k: self.carries[k],
                       lambda fines: {f: len(self.events.get(f, [])) for f in fines},
                       self.chunk_s, write=self._write, with_lanes=False,
                       group_events=self.group_events)
        for k in done.deleted:
            del self.rows[k]
        return done

    def layout(self) -> list[tuple[int, int]]:
        """Each chunk's first fine chunk and its events."""
        return sorted((k, row["state"]["n"]) for k, row in self.rows.items())


def rebuilt(events: list[Event], chunk_s: float, group_events: int) -> list[tuple[int, int]]:
    """The chunks one refresh from nothing stored gives (what a rebuild stores)."""
    whole = _Chunks(chunk_s, group_events)
    whole.refresh(whole.add(events))
    return whole.layout()


@settings(max_examples=examples(300), deadline=None)
@given(stretched_jobs(), st.sampled_from([1, 2, 3, 5, 8, 20, 20_000]),
       st.randoms(use_true_random=False))
def test_any_arrival_order_and_batching_gives_a_rebuilds_chunks(
        job: tuple[list[Event], float], group_events: int, rng: random.Random) -> None:
    events, chunk_s = job
    shuffled = events[:]
    rng.shuffle(shuffled)
    chunks = _Chunks(chunk_s, group_events)
    while shuffled:
        size = rng.randint(1, 6)
        batch, shuffled = shuffled[:size], shuffled[size:]
        chunks.refresh(chunks.add(batch))
    assert chunks.layout() == rebuilt(events, chunk_s, group_events)


def _minute(t: float, rank: int, minute: int) -> Event:
    return validate_event({"v": 1, "id": f"t{minute}-{rank}", "job": "j", "attempt": 0,
                           "kind": "span", "phase": "train", "start": t + 60.0 * minute,
                           "end": t + 60.0 * minute + 60.0, "rank": rank,
                           "step_start": minute, "step_end": minute + 1})


def test_a_live_fine_chunk_that_keeps_growing_splits_where_a_rebuild_would() -> None:
    """Chunks of an hour (``chunk_s`` 3600), at most 100 events: the live hour is placed in
    the chunk before it while it holds few events, then keeps growing. A rebuild would start
    it a chunk of its own once the two do not fit together: so does the refresh."""
    t0 = 40 * 86400.0
    start = validate_event({"v": 1, "id": "s", "job": "j", "attempt": 0, "kind": "mark",
                            "mark": "attempt_start", "ts": t0})
    hour0 = [_minute(t0, rank, m) for m in range(60) for rank in range(1)]  # 60 events
    chunks = _Chunks(3600.0, 100)
    chunks.refresh(chunks.add([start, *hour0]))
    live = [_minute(t0, rank, m) for m in range(60, 120) for rank in range(1)]
    chunks.refresh(chunks.add(live[:10]))  # hour 1 joins hour 0's chunk: 71 events
    assert chunks.layout() == [(chunk_of(t0, 3600.0), 71)]
    for at in range(10, 60, 10):  # and grows: 81, 91, then past 100
        chunks.refresh(chunks.add(live[at:at + 10]))
    everything = [start, *hour0, *live]
    assert chunks.layout() == rebuilt(everything, 3600.0, 100) == [
        (chunk_of(t0, 3600.0), 61), (chunk_of(t0, 3600.0) + 1, 60)]
