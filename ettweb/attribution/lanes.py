"""What the job page draws, computed once when a job's rollups are refreshed.

Drawing the page from the events would attribute the whole job on every load, a cost
that grows with the job. The refresh attributes the job anyway, so it keeps two bounded
pictures of each attempt, and a page load only reads them:

* the **category timeline**: the engine's segments laid out as single-category pieces,
  merged where neighbours agree and, past ``MAX_PIECES`` per attempt, cut into a grid of
  equal bins, each bin keeping the category that covers most of it (a bin is too small to
  see, so nothing visible is lost);
* the **rank lanes**: what each rank was doing (``train``, its innermost blocking phase,
  a background phase, or nothing) on a grid of the same resolution, run-length encoded.
  Ranks whose encodings are identical share ONE lane, labelled with their rank set
  (``0-127, 130-255``), so a job of hundreds of ranks that agree draws a handful of rows.

Pure Python on the engine's normalized event dicts and ``Segment``s (no Django), so the
offline tools, the rollup refresh and the chunked attribution (``chunk_sweep``) all call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import itemgetter
from typing import Final

from collector.schema import TRAIN_PHASE

from .components import PRODUCTIVE
from .engine import REPEATED_TRAINING, UNATTRIBUTED, AttemptWindow, Event, Segment, gc_paused

#: Most pieces one attempt's category timeline keeps; also the finest grid of its lanes.
#: About one per two pixels of a page-wide plot: finer detail cannot be seen.
MAX_PIECES: Final = 600
#: Lanes an attempt aims for. More distinct lanes than this and the lanes' grid is made
#: coarser (never to fewer than ``MIN_LANE_BINS`` bins), since ranks that differ only within a bin
#: (a fraction of a second of jitter at a phase change) should read as agreeing.
LANE_TARGET: Final = 16
MIN_LANE_BINS: Final = 60
#: A rank's state when none of its spans is active; never stored (a lane's gaps).
IDLE: Final = ""
#: The state of a rank inside one of its ``train`` spans.
TRAIN: Final = TRAIN_PHASE

Piece = tuple[str, float, float]  # (category or state, start, end), epoch seconds
_Run = tuple[str, int, int]  # (state, first bin, bin after the last)


@dataclass(frozen=True, slots=True)
class Timeline:
    """One attempt's row of the category timeline (its restart gap included).

    ``bin_s`` is 0.0 when the pieces are the engine's exact boundaries, else the width of
    the grid they were cut into.
    """

    attempt: int
    pieces: tuple[Piece, ...]
    bin_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Lane:
    """Ranks of one attempt that did the same thing at every bin, and what they did.

    ``runs`` leave idle stretches out; ``bin_s`` is the grid the ranks were compared on.
    """

    attempt: int
    ranks: tuple[int, ...]
    runs: tuple[Piece, ...]
    bin_s: float

    @property
    def label(self) -> str:
        return rank_label(self.ranks)


# --------------------------------------------------------------------------- the category timeline

def category_timeline(segments: Iterable[Segment],
                      max_pieces: int = MAX_PIECES) -> list[Timeline]:
    """The engine's segments as one bounded row per attempt, in attempt order.

    A segment holds several categories when its piece was shared (a split between phases,
    training with a repeated fraction); they are laid side by side in time, repeated
    training first (§3.8: a restarted span re-does old steps before new ones). A restart
    gap belongs to the attempt after it, as the engine records it.
    """
    rows: dict[int, list[Piece]] = {}
    with gc_paused():  # many small tuples, no cycles (see gc_paused)
        for segment in segments:
            row = rows.setdefault(segment.attempt, [])
            for piece in _laid_out(segment):
                _append_piece(row, piece)
        return [_bounded(attempt, rows[attempt], max_pieces) for attempt in sorted(rows)]


def _laid_out(segment: Segment) -> list[Piece]:
    """A segment's shares as consecutive pieces; the last ends exactly at the segment's end."""
    if len(segment.shares) == 1:  # most segments: one category
        (category,) = segment.shares
        return [(category, segment.start, segment.end)]
    shares = sorted(((category, seconds) for category, seconds in segment.shares.items()
                     if seconds > 0.0),
                    key=lambda kv: (kv[0] != REPEATED_TRAINING, kv[0]))
    pieces: list[Piece] = []
    cursor = segment.start
    for index, (category, seconds) in enumerate(shares):
        end = segment.end if index == len(shares) - 1 else cursor + seconds
        pieces.append((category, cursor, end))
        cursor = end
    return pieces


def _append_piece(row: list[Piece], piece: Piece) -> None:
    """Extend the previous piece when this one continues it in the same category (a train
    span is re-opened every minute: a day of training is one piece, not 1,440)."""
    if row and row[-1][0] == piece[0]:
        row[-1] = (piece[0], row[-1][1], piece[2])
    else:
        row.append(piece)


def _bounded(attempt: int, pieces: list[Piece], max_pieces: int) -> Timeline:
    if len(pieces) <= max_pieces:
        return Timeline(attempt, tuple(pieces))
    start, end = pieces[0][1], pieces[-1][2]
    width, bins = grid(start, end, max_pieces)
    runs = _binned(pieces, start, end, width, bins)
    return Timeline(attempt, _as_pieces(runs, start, end, width), width)


# --------------------------------------------------------------------------- the grid

def nice_width(seconds: float) -> float:
    """The smallest 1, 2 or 5 x 10^k seconds >= ``seconds``: bin edges read as round
    offsets (0.2 s, 5 s, 10 min) rather than 0.1383 s."""
    if seconds <= 0.0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(seconds))
    for step in (1.0, 2.0, 5.0, 10.0):
        if step * power >= seconds * (1 - 1e-12):
            return step * power
    return 10.0 * power  # unreachable: 10 x 10^floor(log10 s) > s


def grid(start: float, end: float, max_bins: int) -> tuple[float, int]:
    """(bin width, bins) of the round-width grid that covers ``[start, end)`` in at most
    ``max_bins`` bins; the last bin is cut at ``end``."""
    duration = end - start
    if duration <= 0.0:
        return 0.0, 0
    width = nice_width(duration / max_bins)
    return width, max(1, min(max_bins, math.ceil(duration / width - 1e-9)))


def _binned(pieces: Sequence[Piece], start: float, end: float, width: float,
            bins: int) -> list[_Run]:
    """Contiguous pieces covering ``[start, end)`` as runs of grid bins.

    A bin inside one piece takes its state; a bin holding boundaries takes the state that
    covers most of it (ties: a non-idle state, then the name). Walks the boundaries, not the
    bins: a bin holding one boundary goes to the side covering more of it, and only a bin
    holding several (pieces shorter than a bin) adds up what each state covers there. The
    hottest loop of a refresh after the engine's sweep, hence the inlined arithmetic.
    """
    runs: list[_Run] = []
    last = len(pieces) - 1
    final = bins - 1
    cursor = index = 0  # cursor: the first bin not yet given to a run
    while index < last:
        state, _, boundary = pieces[index]
        k = int((boundary - start) / width)
        if k > final:
            k = final
        lo = start + k * width
        hi = end if k == final else lo + width
        if index + 1 == last or pieces[index + 1][2] >= hi:  # bin k holds one boundary
            mine, theirs = boundary - lo, hi - boundary
            wins = (mine > theirs if mine != theirs
                    else _tie(state) > _tie(pieces[index + 1][0]))
            edge = k + 1 if wins else k  # the larger side takes the bin
            after = index
        else:  # several boundaries: the state covering most of bin k
            after = index + 1
            while after + 1 < last and pieces[after + 1][2] < hi:
                after += 1
            if k > cursor:
                _append_run(runs, state, cursor, k)
                cursor = k
            state, edge = _covering_most(pieces, index, after + 1, lo, hi), k + 1
        if edge > cursor:
            if runs and runs[-1][2] == cursor and runs[-1][0] == state:
                runs[-1] = (state, runs[-1][1], edge)
            else:
                runs.append((state, cursor, edge))
            cursor = edge
        index = after + 1
    _append_run(runs, pieces[last][0], cursor, bins)
    return runs


def _tie(state: str) -> tuple[bool, str]:
    """Who takes a bin split exactly in half: a non-idle state, then the later name."""
    return state != IDLE, state


def _covering_most(pieces: Sequence[Piece], first: int, last: int, lo: float,
                   hi: float) -> str:
    """The state of ``pieces[first:last + 1]`` covering most of ``[lo, hi)``."""
    if last == first + 2:  # two boundaries in the bin (a short phase or gap): no dict
        (state, _, boundary), (mid, mid_start, mid_end) = pieces[first], pieces[first + 1]
        nxt = pieces[last][0]
        before_s, mid_s, after_s = boundary - lo, mid_end - mid_start, hi - mid_end
        if nxt == state:
            before_s, after_s = before_s + after_s, -1.0
        return max((before_s, *_tie(state)), (mid_s, *_tie(mid)), (after_s, *_tie(nxt)))[2]
    covered: dict[str, float] = {}
    for index in range(first, last + 1):
        name, a, b = pieces[index]
        overlap = (b if b < hi else hi) - (a if a > lo else lo)
        if overlap > 0.0:
            covered[name] = covered.get(name, 0.0) + overlap
    return max(covered.items(), key=lambda kv: (kv[1], *_tie(kv[0])))[0]


def _append_run(runs: list[_Run], state: str, first: int, stop: int) -> None:
    if stop <= first:
        return
    if runs and runs[-1][0] == state and runs[-1][2] == first:
        runs[-1] = (state, runs[-1][1], stop)
    else:
        runs.append((state, first, stop))


def _as_pieces(runs: Iterable[_Run], start: float, end: float, width: float,
               ) -> tuple[Piece, ...]:
    """Runs of bins back in epoch seconds, idle runs left out."""
    return tuple((state, start + first * width, min(end, start + stop * width))
                 for state, first, stop in runs if state != IDLE)


# --------------------------------------------------------------------------- rank lanes

def job_lanes(windows: Sequence[AttemptWindow], events: Iterable[Event],
              max_pieces: int = MAX_PIECES) -> list[Lane]:
    """Every attempt's lanes, in attempt order then by lowest rank."""
    spans: dict[int, list[Event]] = {}
    for event in events:
        if event["kind"] == "span":
            bucket = spans.get(event["attempt"])
            if bucket is None:
                spans[event["attempt"]] = [event]
            else:
                bucket.append(event)
    lanes: list[Lane] = []
    with gc_paused():  # as in the engine: rescanning every event per burst doubled the cost
        for window in windows:
            lanes += rank_lanes(window, spans.get(window.attempt, ()), max_pieces)
    return lanes


def rank_lanes(window: AttemptWindow, spans: Iterable[Event],
               max_pieces: int = MAX_PIECES) -> list[Lane]:
    """One attempt's ranks grouped into lanes of identical run-length encodings.

    Spans are clamped into the window as the engine clamps them; ranks whose spans all fall
    outside it have no lane. The grid starts at the category timeline's resolution and is
    made coarser while more than ``LANE_TARGET`` lanes differ (see ``LANE_TARGET``).
    """
    start, end = window.start, window.end
    width, bins = grid(start, end, max_pieces)
    # Ranks with exactly the same timeline (common when ranks are in lockstep) are binned once.
    timelines = _timelines_by_rank(sorted(map(_SPAN_FIELDS, spans)), start, end, width)
    if not timelines:
        return []
    while True:
        groups: dict[tuple[_Run, ...], list[int]] = {}
        for pieces, ranks in timelines.items():
            key = tuple(run for run in _binned(pieces, start, end, width, bins)
                        if run[0] != IDLE)
            groups.setdefault(key, []).extend(ranks)
        coarser = nice_width(width * 2)
        fewer = max(1, math.ceil((end - start) / coarser - 1e-9))
        if len(groups) <= LANE_TARGET or fewer < MIN_LANE_BINS:
            break
        width, bins = coarser, fewer
    lanes = [Lane(window.attempt, tuple(sorted(ranks)),
                  _as_pieces(runs, start, end, width), width)
             for runs, ranks in groups.items()]
    return sorted(lanes, key=lambda lane: lane.ranks[0])


#: What a span is to its rank: train beats blocking beats background (§3.4's order). A
#: span named ``productive`` that is not ``train`` reads as ``unattributed``, as the engine
#: reads it.
_TRAIN_KIND, _BLOCKING_KIND, _BACKGROUND_KIND = 0, 1, 2
_SPAN_FIELDS: Final = itemgetter("rank", "start", "end", "phase", "blocking")
_Row = tuple[int, float, float, str, bool]  # _SPAN_FIELDS of a span


def _timelines_by_rank(rows: Sequence[_Row], start: float, end: float,
                       width: float) -> dict[tuple[Piece, ...], list[int]]:
    """Each rank's pieces (``rank_pieces``) -> the ranks that have exactly those.

    ``rows`` are sorted, so each rank's spans come together and by start. The common case
    (a rank whose spans do not overlap) is one fused pass that clamps, names and chains the
    spans; a rank with overlapping spans goes through the general sweep. This runs once per
    span of the job at every refresh, hence the inlining.

    Idle gaps too short to take a bin on the grid of ``width`` are not kept: one shorter
    than half a bin between two stretches of one state joins them, and
    one shorter than a third of a bin between two states is split at its middle (in a bin
    holding it, the two states then compare as they did, and the gap could not have
    outweighed both). Fewer boundaries to bin, and ranks that differ only by such gaps
    agree, as they do on the chart.
    """
    close_gaps_s, split_gaps_s = width / 2, width / 3
    timelines: dict[tuple[Piece, ...], list[int]] = {}
    index, count = 0, len(rows)
    while index < count:
        rank = rows[index][0]
        pieces: list[Piece] = []
        cursor, last, overlapping = start, IDLE, False
        stop = index
        while stop < count and rows[stop][0] == rank:
            _, lo, hi, phase, _ = rows[stop]
            stop += 1
            lo, hi = (lo if lo > start else start), (hi if hi < end else end)
            if hi <= lo or overlapping:
                continue
            if lo < cursor:
                overlapping = True
                continue
            state = phase if phase != PRODUCTIVE else UNATTRIBUTED
            if lo > cursor:
                gap = lo - cursor
                if state == last and gap < close_gaps_s:  # a gap no bin can see
                    pieces[-1] = (state, pieces[-1][1], hi)
                    cursor = hi
                    continue
                if last != IDLE and gap < split_gaps_s:  # ... nor this one: split it
                    middle = cursor + gap / 2
                    pieces[-1] = (last, pieces[-1][1], middle)
                    pieces.append((state, middle, hi))
                    last, cursor = state, hi
                    continue
                if last == IDLE and pieces:
                    pieces[-1] = (IDLE, pieces[-1][1], lo)
                else:
                    pieces.append((IDLE, cursor, lo))
                last = IDLE
            if state == last and pieces:
                pieces[-1] = (state, pieces[-1][1], hi)
            else:
                pieces.append((state, lo, hi))
                last = state
            cursor = hi
        if overlapping:
            pieces = rank_pieces([_clamped_span(row, start, end) for row in rows[index:stop]
                                  if min(row[2], end) > max(row[1], start)], start, end)
        elif pieces and end > cursor:
            _extend(pieces, IDLE, cursor, end)
        if pieces:
            timelines.setdefault(tuple(pieces), []).append(rank)
        index = stop
    return timelines


def _clamped_span(row: _Row, start: float, end: float) -> tuple[float, float, int, str]:
    """A span row as ``rank_pieces`` reads it: clamped bounds, its kind and its state."""
    _, lo, hi, phase, blocking = row
    if phase == TRAIN_PHASE:
        kind, state = _TRAIN_KIND, TRAIN
    else:
        kind = _BLOCKING_KIND if blocking else _BACKGROUND_KIND
        state = phase if phase != PRODUCTIVE else UNATTRIBUTED
    return max(lo, start), min(hi, end), kind, state


def rank_pieces(spans: Sequence[tuple[float, float, int, str]], start: float,
                end: float) -> list[Piece]:
    """One rank's state over ``[start, end)`` as contiguous pieces (idle ones included),
    for a rank whose spans overlap (``_timelines_by_rank`` chains the others in one pass).

    ``spans`` are ``(clamped start, clamped end, kind, name)``. At each moment the state is
    ``train`` if a train span is active, else the innermost active blocking phase, else the
    innermost background phase, else idle. Innermost as §3.4.2 reads it: the active span
    with the latest start, and of those the earliest end, contains no other active span;
    when several spans overlap without nesting it is the one that started last.
    """
    ordered = sorted(spans)
    cuts = sorted({start, end, *(s[0] for s in spans), *(s[1] for s in spans)})
    active: list[tuple[float, float, int, str]] = []
    pieces: list[Piece] = []
    next_span = 0
    for lo, hi in pairwise(cuts):
        active = [s for s in active if s[1] > lo]
        while next_span < len(ordered) and ordered[next_span][0] <= lo:
            if ordered[next_span][1] > lo:
                active.append(ordered[next_span])
            next_span += 1
        _extend(pieces, _state(active), lo, hi)
    return pieces


def _extend(pieces: list[Piece], state: str, lo: float, hi: float) -> None:
    if pieces and pieces[-1][0] == state:
        pieces[-1] = (state, pieces[-1][1], hi)
    else:
        pieces.append((state, lo, hi))


def _state(active: Sequence[tuple[float, float, int, str]]) -> str:
    if not active:
        return IDLE
    kind = min(span[2] for span in active)
    if kind == _TRAIN_KIND:
        return TRAIN
    return max((span for span in active if span[2] == kind),
               key=lambda span: (span[0], -span[1], span[3]))[3]


def rank_label(ranks: Iterable[int]) -> str:
    """``0-127, 130-255``: a rank set as ascending ranges."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        first = last = ordered[index]
        while index + 1 < len(ordered) and ordered[index + 1] == last + 1:
            index += 1
            last = ordered[index]
        parts.append(str(first) if first == last else f"{first}-{last}")
        index += 1
    return ", ".join(parts)

