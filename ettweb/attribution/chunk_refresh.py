"""Bringing a job's stored chunks up to date after new events landed in some fine chunks.

A refresh first lays out the chunks around the fine chunks the new events landed in
(:func:`plan`, :mod:`.chunk_layout`): a chunk takes in fine chunks of its day while it holds
at most ``GROUP_EVENTS`` events, so a short small job is one chunk and a thousand-rank job
one per fine chunk, the same whatever order the events came in. It then reads the chunks
they fall in for their summaries, folds the job's skeleton (:mod:`.chunk_summary`) and walks
the chunks in time order, recomputing (:mod:`.chunk_sweep`) a chunk that got new events or
whose key changed, so a changed carry reaches the next chunk in the same pass. A running
attempt's growing end changes only its last chunk's key; a late event days back recomputes
its chunk and any chunk its carry or high-water mark reaches, and no more. So a refresh
costs what the new events change, and holds about one chunk's events and carry plus the
small state of every chunk, whatever the job's age.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from .bounds import MAX_JOB_DAYS, check_windows
from .chunk_layout import Plan
from .chunk_layout import plan as layout_plan
from .chunk_summary import CHUNK_S, Skeleton, fold, summarize
from .chunk_sweep import NO_CARRY, ChunkState, chunk_key, compute_chunk
from .engine import Event, gc_paused

#: Events a refresh keeps in memory between reading a chunk for its summary and sweeping it
#: (above it, the chunk is read again): bounds a refresh's memory whatever the backlog.
CACHED_EVENTS: Final = 150_000


@dataclass
class Refreshed:
    """What one refresh of a job's chunks did: every chunk's state after it (the
    recomputed ones with their big fields let go once written), the chunks gone, and the
    job's skeleton (``None``: the job has no events left)."""

    skeleton: Skeleton | None
    states: dict[int, ChunkState]
    written: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    events_read: int = 0


#: A chunk takes in fine chunks (of ``chunk_s``) until it holds about this many events:
#: a short small job is one chunk (one read, one row), a thousand-rank job one per fine
#: chunk (a refresh reads a quarter hour of it, never the whole). A refresh costs about
#: the live chunk's events plus a little per chunk of the job; 2,000 balances the two for
#: a small job reporting for weeks (docs/explanation/capacity.md).
GROUP_EVENTS: Final = 2_000


def plan(dirty: Collection[int], stored: Mapping[int, ChunkState],
         count_home: Callable[[Sequence[int]], Mapping[int, int]], chunk_s: float = CHUNK_S,
         group_events: int | None = None) -> Plan:
    """Lay out the job's chunks after new events landed in the ``dirty`` fine chunks
    (:mod:`.chunk_layout`: greedy per day, whatever order the events came in).
    ``count_home(fines)``: events per fine chunk; ``group_events``: default ``GROUP_EVENTS``."""
    return layout_plan(dirty, stored, count_home, chunk_s,
                       GROUP_EVENTS if group_events is None else group_events)


def followers(starts: Sequence[int]) -> dict[int, int | None]:
    """Each chunk's next chunk's first fine chunk (``None`` for the last)."""
    return {k: (starts[i + 1] if i + 1 < len(starts) else None) for i, k in enumerate(starts)}


def refresh(dirty: Collection[int], stored: Mapping[int, ChunkState],
            read_home: Callable[[int, int | None], list[Event]],
            read_carry: Callable[[int], list[Event]],
            count_home: Callable[[Sequence[int]], Mapping[int, int]],
            chunk_s: float = CHUNK_S, *, write: Callable[[ChunkState], None] | None = None,
            with_lanes: bool = True, cached_events: int = CACHED_EVENTS,
            group_events: int | None = None, max_days: int = MAX_JOB_DAYS) -> Refreshed:
    """Bring a job's chunks up to date after new events landed in the ``dirty`` fine
    chunks.

    ``stored``: the chunks as kept (small fields only); ``read_home(k, following)``: the home
    events of the chunk starting at fine chunk k, up to the next chunk's (``None``: on);
    ``read_carry(k)``: the carry kept with chunk k; ``count_home(fine)``: events per fine
    chunk; ``write``: called with each recomputed chunk, big fields included, before they
    are let go. Places the dirty fine chunks (:func:`plan`), reads the chunks they fall in
    for their summaries (keeping up to ``cached_events`` events for the sweep), folds the
    skeleton, then walks the chunks in time order and recomputes those that are dirty or
    whose key changed (module doc). Memory: about one chunk's events and carry, plus the
    small state of every chunk. A job whose window leaves the bounds (``max_days``,
    :mod:`.bounds`) raises :class:`.bounds.JobOutOfBounds` before any chunk is swept.
    """
    placed = plan(dirty, stored, count_home, chunk_s, group_events)
    return refresh_planned(placed, stored, read_home, read_carry, chunk_s, write=write,
                           with_lanes=with_lanes, cached_events=cached_events,
                           max_days=max_days)


def refresh_planned(placed: Plan, stored: Mapping[int, ChunkState],
                    read_home: Callable[[int, int | None], list[Event]],
                    read_carry: Callable[[int], list[Event]], chunk_s: float = CHUNK_S, *,
                    write: Callable[[ChunkState], None] | None = None, with_lanes: bool = True,
                    cached_events: int = CACHED_EVENTS,
                    max_days: int = MAX_JOB_DAYS) -> Refreshed:
    """:func:`refresh` once the dirty fine chunks are placed (:func:`plan`)."""
    with gc_paused():
        return _refresh(placed, stored, read_home, read_carry, chunk_s, write, with_lanes,
                        cached_events, max_days)


def _refresh(placed: Plan, stored: Mapping[int, ChunkState],
             read_home: Callable[[int, int | None], list[Event]],
             read_carry: Callable[[int], list[Event]], chunk_s: float,
             write: Callable[[ChunkState], None] | None, with_lanes: bool,
             cached_events: int, max_days: int) -> Refreshed:
    starts = placed.chunks
    following = followers(starts)
    summaries = {k: stored[k].summary for k in starts if k in stored and stored[k].summary}
    cache: dict[int, list[Event]] = {}
    kept = 0
    result = Refreshed(skeleton=None, states={})
    for k in sorted(placed.dirty):
        if k in stored and stored[k].final:
            continue  # no events left to read: a final chunk stays as it is
        events = read_home(k, following[k])
        result.events_read += len(events)
        if events:
            summaries[k] = summarize(events)
            if kept + len(events) <= cached_events:
                cache[k], kept = events, kept + len(events)
        else:
            summaries.pop(k, None)
    # A chunk left with no events of its own is gone: the one before it sweeps its time.
    starts = [k for k in starts if k in summaries or (k in stored and stored[k].final)]
    following = followers(starts)
    skeleton = result.skeleton = fold(summaries.values())
    if skeleton is None:
        result.deleted = sorted(stored)
        return result
    check_windows(skeleton.windows, max_days)  # before any loop over the job's days
    previous: ChunkState | None = None
    for k in starts:
        carry_digest = previous.carry_digest if previous else NO_CARRY
        carry_ext = previous.carry_ext if previous else {}
        h_in = previous.h_out if previous is not None else 0
        summary = summaries.get(k, {})
        old = stored.get(k)
        key = chunk_key(k, following[k], chunk_s, summary, carry_ext, carry_digest, h_in,
                        skeleton)
        if old is not None and old.final:
            state = old
        elif k in placed.dirty or old is None or old.key != key:
            carry_in: list[Event] = []
            if previous is not None and carry_digest:
                if previous.carry is None:
                    previous.carry = read_carry(previous.chunk)
                carry_in = previous.carry
            if k in cache:
                events = cache.pop(k)
            else:
                events = read_home(k, following[k])
                result.events_read += len(events)
            state = compute_chunk(k, following[k], chunk_s, events, carry_in, h_in, skeleton,
                                  summary=summary, key=key, with_lanes=with_lanes)
            result.written.append(k)
            if write is not None:
                write(state)
        else:
            state = old
        if previous is not None:  # its carry has been read: let the big fields go
            _let_go(previous)
        result.states[k] = state
        previous = state
    if previous is not None:
        _let_go(previous)
    result.deleted = sorted(set(stored) - set(result.states))
    return result


def _let_go(state: ChunkState) -> None:
    """Drop a chunk's big fields once written and read: a refresh holds about one chunk's."""
    state.carry = state.segments = state.timelines = state.lanes = None
