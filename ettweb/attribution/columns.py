"""A job's spans as numpy columns, each field read out of the event dicts once.

Why: reading a field out of a million event dicts costs more than anything numpy then
does with it, and the engine's array path wants the same fields at several steps (attempt
extents, train splits, recovery, anomalies and the sweep of :mod:`.piece_runs`). Read
once per job, straight into arrays, they serve every step.

Values come back as Python numbers (``tolist``), so results are the same floats and ints
the plain path computes from the dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from collector.schema import TRAIN_PHASE

Event = dict[str, Any]
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

_START: Final = itemgetter("start")
_END: Final = itemgetter("end")
_PHASE: Final = itemgetter("phase")
_BLOCKING: Final = itemgetter("blocking")
_RANK: Final = itemgetter("rank")
_STEP_START: Final = itemgetter("step_start")
_STEP_END: Final = itemgetter("step_end")


@dataclass(frozen=True, slots=True)
class SpanColumns:
    """A job's spans attempt by attempt (the first ``counts[0]`` are the first attempt's,
    and so on) and their fields as columns: span ``i`` starts at ``start[i]``, its phase
    is ``names[name[i]]``, and so on. Ranks matter only among blocking spans (whose
    innermost phase is per rank), so only theirs are read."""

    spans: list[Event]
    counts: list[int]
    start: Floats
    end: Floats
    names: list[str]
    name: Ints
    train: Bools
    blocking: Bools  # blocking spans other than train ones (§3.4: train comes first)
    rank: Ints  # the rank of each ``blocking`` span, in span order

    def attempt_of(self) -> Ints:
        """Each span's attempt, as its place in the job's attempt order."""
        return np.repeat(np.arange(len(self.counts)), self.counts)

    def extents(self) -> tuple[list[float], list[float]]:
        """Per attempt, its spans' earliest start and latest end (inf and -inf: none)."""
        counts = np.array(self.counts)
        has = counts > 0
        heads = (np.cumsum(counts) - counts)[has]
        first = np.full(len(counts), np.inf)
        last = np.full(len(counts), -np.inf)
        if has.any():
            first[has] = np.minimum.reduceat(self.start, heads)
            last[has] = np.maximum.reduceat(self.end, heads)
        return first.tolist(), last.tolist()

    def outside(self, starts: list[float], ends: list[float]) -> list[int]:
        """Per attempt, how many of its spans reach outside its window ``[starts[i],
        ends[i]]``."""
        attempt = self.attempt_of()
        out = ((self.start < np.array(starts)[attempt])
               | (self.end > np.array(ends)[attempt]))
        counted: list[int] = np.bincount(attempt[out], minlength=len(self.counts)).tolist()
        return counted


def span_columns(spans: list[Event], counts: list[int]) -> SpanColumns | None:
    """The columns of ``spans`` (``counts``: how many each attempt has, in order), or
    ``None`` when the plain path must read them: a bound at zero (whose sign the plain
    path's ``min`` and sets decide) or a rank past 64 bits."""
    n = len(spans)
    start = np.fromiter(map(_START, spans), dtype=np.float64, count=n)
    end = np.fromiter(map(_END, spans), dtype=np.float64, count=n)
    if not (start.all() and end.all()):
        return None
    phases = list(map(_PHASE, spans))
    code_of = {name: code for code, name in enumerate(dict.fromkeys(phases))}
    name = np.fromiter(map(code_of.__getitem__, phases), dtype=np.int64, count=n)
    train = name == code_of.get(TRAIN_PHASE, -1)
    others = ~train  # train comes first whatever its flag (§3.4): only others' is read
    blocking = np.zeros(n, dtype=np.bool_)
    blocking[others] = np.fromiter(map(_BLOCKING, compress(spans, others.tolist())),
                                   dtype=np.bool_, count=n - int(np.count_nonzero(train)))
    try:
        rank = np.fromiter(map(_RANK, compress(spans, blocking.tolist())), dtype=np.int64,
                           count=int(np.count_nonzero(blocking)))
    except OverflowError:
        return None
    return SpanColumns(spans=spans, counts=counts, start=start, end=end, names=list(code_of),
                       name=name, train=train, blocking=blocking, rank=rank)


@dataclass(frozen=True, slots=True)
class TrainColumns:
    """A job's train spans (in column order, hence attempt by attempt) as columns;
    ``offsets[i]`` is where attempt ``i``'s begin (``offsets[-1]``: how many)."""

    spans: list[Event]
    start: Floats
    end: Floats
    step_start: Ints
    step_end: Ints
    attempt: Ints
    offsets: list[int]

    def steps_by_attempt(self) -> list[list[int]]:
        """Each attempt's train ``step_start`` values."""
        steps: list[int] = self.step_start.tolist()
        return [steps[a:b] for a, b in zip(self.offsets, self.offsets[1:], strict=False)]

    def by_start(self, attempt: int) -> tuple[list[int], list[float], list[float]]:
        """One attempt's train spans by start (ties in column order): (indices, starts,
        ends)."""
        a, b = self.offsets[attempt], self.offsets[attempt + 1]
        order = np.argsort(self.start[a:b], kind="stable") + a
        return order.tolist(), self.start[order].tolist(), self.end[order].tolist()


def train_columns(columns: SpanColumns) -> TrainColumns | None:
    """The train spans' columns, or ``None`` when a step does not fit in 64 bits."""
    spans = list(compress(columns.spans, columns.train.tolist()))
    n = len(spans)
    try:
        step_start = np.fromiter(map(_STEP_START, spans), dtype=np.int64, count=n)
        step_end = np.fromiter(map(_STEP_END, spans), dtype=np.int64, count=n)
    except OverflowError:
        return None
    attempt = columns.attempt_of()[columns.train]
    offsets = np.zeros(len(columns.counts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(attempt, minlength=len(columns.counts)), out=offsets[1:])
    return TrainColumns(spans=spans, start=columns.start[columns.train],
                        end=columns.end[columns.train], step_start=step_start,
                        step_end=step_end, attempt=attempt, offsets=offsets.tolist())


def high_water(train: TrainColumns) -> tuple[Ints, Ints] | None:
    """§3.4.1 on arrays: the indices of the train spans whose H exceeds their
    ``step_start`` (that re-do steps), and their H; ``None`` when the plain walk must
    decide.

    H is the largest ``step_end`` among the job's train spans that ended at or before the
    span's start: sort by end, take running maxima, look each start up. A zero-length span
    would count itself there, so a job with one is left to the plain walk.
    """
    start, end = train.start, train.end
    if bool(np.any(end <= start)):
        return None
    order = np.argsort(end, kind="stable")
    highest = np.maximum.accumulate(train.step_end[order])
    ended = np.searchsorted(end[order], start, side="right")
    high = np.where(ended > 0, highest[np.maximum(ended - 1, 0)], 0)
    redo = np.flatnonzero(high > train.step_start)
    return redo, high[redo]


def split_codes(count: int, indices: Ints, codes: list[int]) -> Ints:
    """Each of ``count`` train spans' split code: ``codes`` at ``indices``, else 0."""
    full = np.zeros(count, dtype=np.int64)
    full[indices] = codes
    return full
