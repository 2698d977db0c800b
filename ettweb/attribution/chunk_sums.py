"""A job's numbers summed from its chunks: totals, day rows, recoveries, the page's timeline.

Each chunk's parts are kept per attempt, UTC day and split (:mod:`.chunk_sweep`), so the
job's totals and its (day, category) rows are sums over its chunks, plus the restart gaps
between attempt windows (§3.2): the only time no chunk sweeps. A recovery (§3.8) needs the
categories inside its interval, so it reads the segments of just the chunks that interval
covers, never the job's. :func:`attribute_in_chunks` runs the whole chunked attribution
from nothing stored: the property tests hold it equal to :func:`engine.attribute_job`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from itertools import pairwise
from typing import Final

from collector.schema import FAILED_STATUSES

from .bounds import capped
from .chunk_refresh import refresh
from .chunk_summary import CHUNK_S, Skeleton, check_chunk_s, chunk_of, home_of, home_time
from .chunk_sweep import ChunkState
from .components import PRODUCTIVE
from .engine import (
    _ONE,
    ANOMALY_KINDS,
    DAY_S,
    RESTART_GAP,
    Event,
    JobAttribution,
    Recovery,
    Segment,
    Signature,
    _overlap_shares,
    _shares,
    _Totals,
    per_day,
    recoveries_from,
)
from .implied import BACKWARDS, implied_in_job
from .lanes import MAX_PIECES, Piece, Timeline, _append_piece, _bounded

_RESTART_SIG: Final[Signature] = (_ONE, RESTART_GAP)


@dataclass(frozen=True)
class Assembled:
    """A job's attribution summed from its chunks: ``attribution`` as
    :func:`engine.attribute_job` gives it (its ``segments`` left empty: they stay with the
    chunks) and ``days``: (UTC day, category) -> (seconds, GPU-seconds), productive too."""

    attribution: JobAttribution
    days: dict[tuple[date, str], tuple[float, float]]


def day_values(attribution: JobAttribution) -> dict[tuple[date, str], tuple[float, float]]:
    """(UTC day, category) -> (seconds, GPU-seconds) of a whole-job attribution, from its
    segments, zeros left out: what :class:`Assembled` holds in ``days``."""
    seconds = per_day(attribution.segments, gpu_weighted=False)
    gpu_seconds = per_day(attribution.segments)
    values: dict[tuple[date, str], tuple[float, float]] = {}
    for day, categories in seconds.items():
        gpu_day = gpu_seconds.get(day, {})
        for category, value in categories.items():
            gpu_value = gpu_day.get(category, 0.0)
            if value or gpu_value:
                values[(day, category)] = (value, gpu_value)
    return values


def utc_day(ts: float) -> date:
    """The UTC day an epoch second falls on."""
    return datetime.fromtimestamp((ts // DAY_S) * DAY_S, UTC).date()


def _restart_gaps(skeleton: Skeleton) -> list[Segment]:
    """The restart gaps between windows (§3.2), one-category segments (GPUs 1): the only
    time no chunk sweeps. (Every window starts at one of its events, so after the job's
    first chunk has started.)"""
    return [Segment(previous.end, w.start, w.attempt, 1, {RESTART_GAP: w.start - previous.end})
            for previous, w in pairwise(skeleton.windows) if w.start > previous.end]


def assemble(job: str, skeleton: Skeleton, states: Mapping[int, ChunkState],
             read_segments: Callable[[Sequence[int]], Mapping[int, list[Segment]]],
             chunk_s: float = CHUNK_S,
             extra_anomalies: Mapping[str, int] | None = None) -> Assembled:
    """The job's numbers from its skeleton and chunks (see :class:`Assembled`).

    ``read_segments`` gives chunks' segments, asked only for the chunks a recovery
    interval overlaps (their parts are read off segments, §3.8). ``extra_anomalies``:
    counts no chunk sees, added in (the backwards heartbeats of §3 rule 3).
    """
    windows = skeleton.windows
    gpus = {w.attempt: w.gpus for w in windows}
    occupied = sorted(states)
    durations: dict[int, dict[Signature, float]] = {w.attempt: {} for w in windows}
    days: dict[tuple[date, str], list[float]] = {}

    def add(attempt: int, sig: Signature, seconds: float, day: date) -> None:
        bucket = durations[attempt]
        bucket[sig] = bucket.get(sig, 0.0) + seconds
        weight = gpus[attempt]
        for category, part in _shares(sig, seconds).items():
            cell = days.get((day, category))
            if cell is None:
                days[(day, category)] = [part, part * weight]
            else:
                cell[0] += part
                cell[1] += part * weight

    for k in occupied:
        for attempt, part in states[k].parts.items():
            for (day, sig), seconds in part.durations.items():
                add(attempt, sig, seconds, utc_day(day * DAY_S))
    gaps = _restart_gaps(skeleton)
    for gap in gaps:
        cursor = gap.start
        while cursor < gap.end:  # split at midnight (§3.6)
            stop = min(gap.end, (cursor // DAY_S + 1) * DAY_S)
            add(gap.attempt, _RESTART_SIG, stop - cursor, utc_day(cursor))
            cursor = stop
    totals = _Totals()
    for w in windows:
        totals.add(durations[w.attempt], w.gpus)
    firsts = [_first_of(w.attempt, states, occupied) for w in windows]
    recovered = recoveries_from(windows, firsts)
    recoveries = [_recovery(attempt, start, end, occupied, gaps, gpus, read_segments, chunk_s)
                  for attempt, start, end in recovered]
    anomalies = dict(skeleton.anomalies)
    for kind, count in (extra_anomalies or {}).items():
        anomalies[kind] = anomalies.get(kind, 0) + count
    repeated: dict[int, int] = {}
    for k in occupied:
        for attempt, part in states[k].parts.items():
            for kind, count in part.anomalies.items():
                anomalies[kind] = anomalies.get(kind, 0) + count
            if part.repeated_steps:
                repeated[attempt] = capped(repeated.get(attempt, 0) + part.repeated_steps)
    ordered_anomalies = {k: anomalies[k] for k in ANOMALY_KINDS if anomalies.get(k)}
    attribution = JobAttribution(
        job=job, attempts=windows, wall_s=windows[-1].end - windows[0].start,
        productive_s=totals.seconds.pop(PRODUCTIVE, 0.0), wall_gpu_s=totals.wall_gpu_s,
        productive_gpu_s=totals.gpu_seconds.pop(PRODUCTIVE, 0.0),
        lost_s={k: v for k, v in totals.seconds.items() if v != 0.0},
        lost_gpu_s={k: v for k, v in totals.gpu_seconds.items() if v != 0.0},
        repeated_steps=capped(sum(repeated.values())),
        time_to_start_s=(None if skeleton.train_start is None
                         else max(0.0, skeleton.train_start - windows[0].start)),
        time_to_recover_s=[end - start for _, start, end in recovered],
        failures=sum(1 for w in windows if w.status in FAILED_STATUSES),
        segments=[], recoveries=recoveries, anomalies=ordered_anomalies,
        repeated_steps_by_attempt=dict(sorted(repeated.items())))
    return Assembled(attribution, {key: (s, g) for key, (s, g) in days.items() if s or g})


def _first_of(attempt: int, states: Mapping[int, ChunkState],
              occupied: Sequence[int]) -> float | None:
    """The attempt's first productive second: the earliest of its chunks' (§3.8)."""
    found = [part.first_productive for k in occupied
             if (part := states[k].parts.get(attempt)) is not None
             and part.first_productive is not None]
    return min(found, default=None)


def _recovery(attempt: int, start: float, end: float, occupied: Sequence[int],
              gaps: Sequence[Segment], gpus: Mapping[int, int],
              read_segments: Callable[[Sequence[int]], Mapping[int, list[Segment]]],
              chunk_s: float) -> Recovery:
    """One recovery's categories (§3.8), read off the segments of the chunks whose extent
    (up to the next chunk's start) its interval overlaps."""
    first = max(0, bisect_right(occupied, math.floor(start / chunk_s)) - 1)
    inside = [k for k in occupied[first:] if k * chunk_s < end]
    segments = [seg for k, segs in read_segments(inside).items() for seg in segs]
    seconds: dict[str, float] = {}
    gpu_seconds: dict[str, float] = {}
    for seg in (*segments, *gaps):
        if seg.end <= start or seg.start >= end:
            continue
        for category, part in _overlap_shares(seg, start, end).items():
            seconds[category] = seconds.get(category, 0.0) + part
            gpu_seconds[category] = gpu_seconds.get(category, 0.0) + part * gpus[seg.attempt]
    return Recovery(attempt, start, end, seconds, gpu_seconds)


def job_timeline(skeleton: Skeleton, timelines: Mapping[int, Sequence[Timeline]],
                 max_pieces: int = MAX_PIECES) -> list[Timeline]:
    """The job page's category timeline (one bounded row per attempt) from the chunks'
    timelines and the restart gaps (a gap belongs to the attempt after it)."""
    rows: dict[int, list[Piece]] = {w.attempt: [] for w in skeleton.windows}
    pieces: list[tuple[float, int, Sequence[Piece]]] = []
    for chunk_rows in timelines.values():
        for timeline in chunk_rows:
            if timeline.pieces:
                pieces.append((timeline.pieces[0][1], timeline.attempt, timeline.pieces))
    for gap in _restart_gaps(skeleton):
        pieces.append((gap.start, gap.attempt, ((RESTART_GAP, gap.start, gap.end),)))
    for _, attempt, run in sorted(pieces, key=lambda p: (p[0], p[1])):
        row = rows.setdefault(attempt, [])
        for piece in run:
            _append_piece(row, piece)
    return [_bounded(attempt, rows[attempt], max_pieces) for attempt in sorted(rows)
            if rows[attempt]]


def attribute_in_chunks(events: Sequence[Event], chunk_s: float = CHUNK_S,
                        group_events: int | None = None) -> Assembled:
    """One job's events attributed chunk by chunk from nothing stored (the tests' and the
    offline tools' entry; ``events`` deduplicated and of one job)."""
    check_chunk_s(chunk_s)
    if not events:
        raise ValueError("attribute_in_chunks needs at least one event")
    job = str(events[0]["job"])
    implied, backwards = implied_in_job(job, events)  # §3 rule 3, as a refresh stores them
    by_fine: dict[int, list[Event]] = {}
    for event in (*events, *implied):
        by_fine.setdefault(chunk_of(home_time(event), chunk_s), []).append(event)
    segments: dict[int, list[Segment]] = {}

    def keep(state: ChunkState) -> None:
        segments[state.chunk] = state.segments or []

    done = refresh(set(by_fine), {}, lambda k, following: home_of(by_fine, k, following),
                   lambda k: [], lambda fines: {f: len(by_fine.get(f, [])) for f in fines},
                   chunk_s, write=keep, with_lanes=False, group_events=group_events)
    assert done.skeleton is not None
    return assemble(job, done.skeleton, done.states,
                    lambda ks: {k: segments.get(k, []) for k in ks}, chunk_s,
                    extra_anomalies={BACKWARDS: backwards} if backwards else None)
