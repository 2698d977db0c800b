"""Where a job's chunks start: the same bounds whatever order its events arrived in.

A chunk is a run of fine chunks of one UTC day (:mod:`.chunk_summary`). Within a day the
runs are cut greedily: a chunk starts at the day's first fine chunk holding events and takes
in the following ones while it holds at most ``group_events`` events; the first that would
take it past starts the next chunk. That is a function of the events per fine chunk alone,
so a job refreshed batch by batch, in any order, has the chunks a rebuild from all its
events gives (the property tests check it).

Why the bounds must not follow arrival: a fine chunk that keeps receiving events after it
was placed (a running job's live quarter hour) grew its chunk far past the target, so the
chunks of a job depended on when each batch came and no longer matched a rebuild's; and a
chunk's cost is what a refresh of it reads.

A refresh keeps the layout greedy from where its new events land: it re-cuts the day from the
chunk holding the first of them, with the events per fine chunk of the chunks it re-cuts (one
count per chunk's range, read where the new events are), until the cut meets a stored
bound again. A stored chunk the new cut reaches whole keeps its bounds without being counted:
the layout before the refresh was greedy, and events only add up. :func:`placing` is that
walk; it asks for the counts it needs (a generator: a refresh of many jobs asks Postgres
once for all of them) and returns the :class:`Plan`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass

from .chunk_sweep import ChunkState
from .engine import DAY_S

#: Fine chunk ranges ``[lo, hi)`` whose events per fine chunk are wanted.
Ranges = list[tuple[int, int]]
#: Events per fine chunk over the ranges asked for (a fine chunk left out holds none).
Counts = Mapping[int, int]


@dataclass(frozen=True)
class Plan:
    """Which chunks a job has after new events landed in some fine chunks: their first
    fine chunks in order, and which of them must be read and computed again (new, re-cut,
    or holding new events)."""

    chunks: list[int]
    dirty: set[int]


def placing(dirty: Collection[int], stored: Mapping[int, ChunkState], chunk_s: float,
            group_events: int) -> Generator[Ranges, Counts, Plan]:
    """Lay out a job's chunks after new events landed in the ``dirty`` fine chunks.

    ``stored``: the chunks as kept. Yields the fine chunk ranges whose events per fine chunk
    it needs and is sent them (``Counts``); returns the plan. Days without a dirty fine chunk
    keep their chunks; a day with a final chunk (retention: no events left to count) too.
    """
    counts: dict[int, int] = {}
    counted: set[tuple[int, int]] = set()
    while True:
        wanted: Ranges = []
        laid = _lay_out(sorted(dirty), stored, _Known(counts, counted), chunk_s, group_events,
                        wanted)
        if not wanted:
            return laid
        got = yield wanted
        counted.update(wanted)
        counts.update((fine, n) for fine, n in got.items() if n)


def plan(dirty: Collection[int], stored: Mapping[int, ChunkState],
         count_home: Callable[[Sequence[int]], Mapping[int, int]], chunk_s: float,
         group_events: int) -> Plan:
    """:func:`placing` with ``count_home(fines)`` answering its questions (events per fine
    chunk for the listed fine chunks), one range at a time."""
    steps = placing(dirty, stored, chunk_s, group_events)
    try:
        ranges = next(steps)
        while True:
            ranges = steps.send({fine: n for lo, hi in ranges
                                 for fine, n in count_home(range(lo, hi)).items()})
    except StopIteration as done:
        return done.value


@dataclass(frozen=True)
class _Known:
    """The events per fine chunk counted so far, and over which ranges."""

    counts: dict[int, int]
    counted: set[tuple[int, int]]

    def fines(self, lo: int, hi: int) -> list[tuple[int, int]] | None:
        """The occupied fine chunks of ``[lo, hi)`` with their events; ``None``: not counted."""
        if (lo, hi) not in self.counted:
            return None
        return sorted((f, n) for f, n in self.counts.items() if lo <= f < hi)


class _Cut:
    """The greedy cut of one day, chunk by chunk: the chunk being filled, the chunks closed
    (and which of them are not a stored chunk taken as it was)."""

    def __init__(self, group_events: int) -> None:
        self.group_events = group_events
        self.starts: list[int] = []
        self.dirty: set[int] = set()
        self.start: int | None = None  # the chunk being filled
        self.total = 0
        self.kept = False  # it is a stored chunk taken whole, nothing added

    def fine(self, f: int, n: int) -> None:
        """Fine chunk ``f`` with ``n`` events joins the chunk being filled, or starts one."""
        if self.start is not None and self.total + n <= self.group_events:
            self.total += n
            self.kept = False
            return
        self.close()
        self.start, self.total, self.kept = f, n, False

    def block(self, s: int, events: int) -> None:
        """A stored chunk, taken whole as a chunk of its own."""
        self.close()
        self.start, self.total, self.kept = s, events, True

    def absorb(self, events: int) -> None:
        """A stored chunk's whole run joins the chunk being filled."""
        self.total += events
        self.kept = False

    def close(self) -> None:
        if self.start is not None:
            self.starts.append(self.start)
            if not self.kept:
                self.dirty.add(self.start)
        self.start = None


#: A stored chunk of a day as the walk sees it: its first fine chunk, and the range of fine
#: chunks that can hold its events (``[lo, hi)``). ``None`` as the start: fine chunks before
#: the day's first stored chunk (only new events can be there).
_Region = tuple[int | None, int, int]


def _lay_out(dirty: list[int], stored: Mapping[int, ChunkState], known: _Known,
             chunk_s: float, group_events: int, wanted: Ranges) -> Plan:
    """One pass over the days with dirty fine chunks; appends to ``wanted`` the ranges it
    could not cut without counting (the plan is then incomplete)."""
    per_day = round(DAY_S / chunk_s)  # fine chunks a day (chunk_s divides the day)
    dirty_days: dict[int, list[int]] = {}
    for f in dirty:
        dirty_days.setdefault(f // per_day, []).append(f)
    stored_days: dict[int, list[int]] = {}
    for k in sorted(stored):
        stored_days.setdefault(k // per_day, []).append(k)
    chunks: list[int] = []
    marked: set[int] = set()
    for day in sorted({*dirty_days, *stored_days}):
        day_starts = stored_days.get(day, [])
        laid = None
        if day in dirty_days:
            laid = _lay_out_day(dirty_days[day], day_starts, stored, known,
                                (day + 1) * per_day, group_events, wanted)
        if laid is None:  # untouched, left as stored (a final chunk), or waiting for counts
            chunks += day_starts
            continue
        chunks += laid.chunks
        marked |= laid.dirty
    return Plan(chunks, marked)


def _lay_out_day(dirty: list[int], day_starts: list[int], stored: Mapping[int, ChunkState],
                 known: _Known, end: int, group_events: int, wanted: Ranges) -> Plan | None:
    """Re-cut one day (its fine chunks end before ``end``) from the chunk holding its first
    dirty fine chunk; ``None`` when the day keeps its chunks (it has a final one) or counts
    are wanted first."""
    if any(stored[s].final for s in day_starts):
        return None
    i = bisect_right(day_starts, dirty[0]) - 1
    regions = _regions(dirty, day_starts, max(i, 0), stored, end)
    if i < 0:  # new events before the day's first chunk
        hi = day_starts[0] if day_starts else end
        regions.insert(0, (None, dirty[0], _last(dirty, dirty[0], hi) + 1))
    uncounted = [(lo, hi) for s, lo, hi in regions
                 if _last(dirty, lo, hi) >= lo and known.fines(lo, hi) is None]
    if uncounted:  # every region with new events is counted, all in one go
        wanted += uncounted
        return None
    cut = _Cut(group_events)
    for s, lo, hi in regions:
        if s is not None and _last(dirty, lo, hi) < lo and _take_whole(
                cut, s, stored[s].events, day_starts, group_events):
            continue
        fines = known.fines(lo, hi)
        if fines is None:  # its place depends on its fine chunks: counted next round
            wanted.append((lo, hi))
            return None
        for f, n in fines:
            cut.fine(f, n)
    cut.close()
    return Plan(day_starts[:max(i, 0)] + cut.starts, cut.dirty)


def _regions(dirty: list[int], day_starts: list[int], first: int,
             stored: Mapping[int, ChunkState], end: int) -> list[_Region]:
    """The day's stored chunks from index ``first`` on (see :data:`_Region`): each runs to
    the next one, and holds events up to its last one or its last dirty fine chunk."""
    regions: list[_Region] = []
    for k in range(first, len(day_starts)):
        s = day_starts[k]
        nxt = day_starts[k + 1] if k + 1 < len(day_starts) else end
        last = max(stored[s].last_fine, _last(dirty, s, nxt), s)
        regions.append((s, s, min(nxt, last + 1)))
    return regions


def _last(dirty: list[int], lo: int, hi: int) -> int:
    """The last dirty fine chunk in ``[lo, hi)`` (``lo - 1``: none)."""
    i = bisect_left(dirty, hi) - 1
    return dirty[i] if i >= 0 and dirty[i] >= lo else lo - 1


def _take_whole(cut: _Cut, s: int, events: int, day_starts: list[int],
                group_events: int) -> bool:
    """Place an untouched stored chunk without counting it, when its place is known: it
    starts a chunk when nothing is being filled, or when the chunk being filled holds the
    whole of the stored chunk before it (the cut was greedy, and events only add up: what
    did not fit then does not fit now); it joins whole when all of it fits. Otherwise its
    fine chunks must be counted."""
    if cut.start is None:
        cut.block(s, events)
        return True
    if cut.total + events <= group_events:
        cut.absorb(events)
        return True
    k = bisect_left(day_starts, s)
    if cut.total >= group_events or (k > 0 and cut.start <= day_starts[k - 1]):
        cut.block(s, events)
        return True
    return False
