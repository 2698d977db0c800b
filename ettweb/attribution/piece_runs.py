"""The sweep (ETT_SPEC §3.4) of many jobs decided on arrays: which rule holds each piece.

Why: the engine's plain sweep walks every cut point of an attempt in Python, and a job of
many ranks has two cut points per span. Here every piece between two cut points of every
job is classified at once with numpy (prefix sums over where spans start and end), and
Python only walks the *runs* of pieces that share a rule: a few per checkpoint interval,
not two per span. Jobs are done together because numpy's cost is per call: only a job's
cut points are sorted job by job, all else is a few calls for the whole batch.

The pieces come out exactly as the plain sweep decides them, for the jobs this accepts:

* at every piece, the active train spans share one split (ranks training the same steps
  side by side): then the plain sweep's lowest-rank train span has that split;
* no rank has two blocking spans active at once: then each rank's innermost blocking phase
  is its one active span's, and a piece's phase names are those of its active spans.

Any other job (a rank's nested blocking spans, ranks training different steps at one
moment, more than ``MAX_NAMES`` phase names, a cut point at zero, whose sign the plain
sweep's set decides) gets ``None``: the engine sweeps it the plain way. A run's key says
which rule holds it (``BY_TRAIN`` ... ``BY_NOTHING``, in precedence order) and with what:
the split's code for ``BY_TRAIN``, the set of phase names as bits for ``BY_BLOCKING`` and
``BY_BACKGROUND``. The engine turns keys into splits and merges equal neighbours.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Final

import numpy as np

from .columns import Bools, Floats, Ints, SpanColumns

#: What decides a piece, in precedence order (§3.4): a train span, else the innermost
#: blocking phases, else the background phases, else the failure tail, else nothing.
BY_TRAIN, BY_BLOCKING, BY_BACKGROUND, BY_TAIL, BY_NOTHING = range(5)
#: A key is ``value << KIND_BITS | kind``.
KIND_BITS: Final = 3
KIND_MASK: Final = (1 << KIND_BITS) - 1
#: Phase names one job may have: a set of them is summed as float64 bits, exact below 2**53.
MAX_NAMES: Final = 52
#: One window's runs: where each starts (epoch seconds) and its key; the last run ends at
#: the window's end.
Runs = tuple[list[float], list[int]]


@dataclass(frozen=True, slots=True)
class JobSweep:
    """What one job's sweep reads: its attempt windows as columns, in attempt order
    (disjoint and ordered, as ``engine.attempt_windows`` builds them), its spans, and the
    split of each train span (in span order) as its place in ``splits``."""

    starts: Sequence[float]
    ends: Sequence[float]
    tails: Sequence[float]  # where each failure tail starts (the window's last event)
    failed: Sequence[bool]
    columns: SpanColumns
    codes: Ints
    splits: list[Hashable]


@dataclass(frozen=True, slots=True)
class JobRuns:
    """Each window's runs, and what their keys' codes stand for."""

    runs: list[Runs]
    names: list[str]  # phase name of each name code (the bits of a key's value)
    splits: list[Hashable]  # split of each code of a ``BY_TRAIN`` key


def fleet_runs(jobs: Sequence[JobSweep]) -> list[JobRuns | None]:
    """Each job's runs of pieces with one key, or ``None`` for a job the plain sweep must
    decide."""
    found: list[JobRuns | None] = [None] * len(jobs)
    taken = [index for index, job in enumerate(jobs) if len(job.columns.names) <= MAX_NAMES]
    if taken:
        batch = _Batch([jobs[index] for index in taken])
        for index, runs in zip(taken, batch.runs(), strict=True):
            if runs is not None:
                found[index] = JobRuns(runs, jobs[index].columns.names, jobs[index].splits)
    return found


class _Batch:
    """The taken jobs' spans and windows end to end, and their pieces.

    Cut points are numbered across the batch, job after job, so piece ``i`` runs from cut
    ``i`` to cut ``i + 1`` and the pieces of different jobs never overlap: one pass of
    array operations serves every job. ``bad`` marks the jobs found to need the plain sweep.
    """

    def __init__(self, jobs: list[JobSweep]) -> None:
        self.jobs = jobs
        columns = [job.columns for job in jobs]
        train = np.concatenate([c.train for c in columns])
        split = np.zeros(len(train), dtype=np.int64)
        split[train] = np.concatenate([job.codes for job in jobs])
        windows = np.array([len(job.starts) for job in jobs])
        self.ws = np.fromiter(chain.from_iterable(job.starts for job in jobs), np.float64)
        self.we = np.fromiter(chain.from_iterable(job.ends for job in jobs), np.float64)
        self.tails = np.fromiter(chain.from_iterable(job.tails for job in jobs), np.float64)
        self.failed = np.fromiter(chain.from_iterable(job.failed for job in jobs), np.bool_)
        self.window_job = np.repeat(np.arange(len(jobs)), windows)
        self.window_offsets = _offsets(windows)
        spans = np.array([len(c.spans) for c in columns])
        window_of_span = np.repeat(np.arange(len(self.ws)),
                                   list(chain.from_iterable(c.counts for c in columns)))
        lo, hi = self.ws[window_of_span], self.we[window_of_span]
        cs = np.minimum(np.maximum(np.concatenate([c.start for c in columns]), lo), hi)
        ce = np.minimum(np.maximum(np.concatenate([c.end for c in columns]), lo), hi)
        live = ce > cs  # spans left with some length (§3.2)
        self.cs, self.ce = cs[live], ce[live]
        self.job = np.repeat(np.arange(len(jobs)), spans)[live]
        self.name = np.concatenate([c.name for c in columns])[live]
        self.train, self.split = train[live], split[live]
        blocking = np.concatenate([c.blocking for c in columns])
        self.blocking = blocking[live]
        self.ranks = np.concatenate([c.rank for c in columns])[live[blocking]]
        self.span_offsets = _offsets(np.bincount(self.job, minlength=len(jobs)))
        self.bad = np.zeros(len(jobs), dtype=np.bool_)

    def runs(self) -> list[list[Runs] | None]:
        """Each job's runs per window (``None``: the plain sweep must decide)."""
        self._place()
        self._check_blocking()
        keys = self._keys()
        breaks = np.ones(len(keys), dtype=np.bool_)
        np.not_equal(keys[1:], keys[:-1], out=breaks[1:])
        breaks[self.window_first[self.window_first < len(keys)]] = True
        at = np.flatnonzero(breaks)
        starts, run_keys = self.cuts[at].tolist(), keys[at].tolist()
        first = np.searchsorted(at, self.window_first).tolist()
        last = np.searchsorted(at, self.window_last).tolist()
        offsets, bad = self.window_offsets.tolist(), self.bad.tolist()
        return [None if bad[job] else
                [(starts[first[w]:last[w]], run_keys[first[w]:last[w]])
                 for w in range(offsets[job], offsets[job + 1])]
                for job in range(len(self.jobs))]

    def _place(self) -> None:
        """Number the batch's distinct cut points, job after job (each job's sorted), and
        place span bounds, window bounds and tails on them."""
        cs, ce, ws, we, tails = self.cs, self.ce, self.ws, self.we, self.tails
        n, w = np.diff(self.span_offsets), np.diff(self.window_offsets)
        sizes = 2 * n + 3 * w  # a job's values: span starts, ends, window starts, ends, tails
        origin = _offsets(sizes)
        parts: list[Floats] = []
        orders: list[Ints] = []
        spans, windows, origins = (self.span_offsets.tolist(), self.window_offsets.tolist(),
                                   origin.tolist())
        for job in range(len(self.jobs)):
            s, t = slice(spans[job], spans[job + 1]), slice(windows[job], windows[job + 1])
            part = np.concatenate((cs[s], ce[s], ws[t], we[t], tails[t]))
            parts.append(part)
            orders.append(np.argsort(part, kind="stable") + origins[job])
        order = np.concatenate(orders)
        ordered = np.concatenate(parts)[order]
        job_of = np.repeat(np.arange(len(self.jobs)), sizes)
        distinct = np.ones(len(ordered), dtype=np.bool_)
        np.not_equal(ordered[1:], ordered[:-1], out=distinct[1:])
        distinct[1:] |= job_of[1:] != job_of[:-1]
        self.cuts = ordered[distinct]
        placed = np.empty(len(order), dtype=np.int64)
        placed[order] = np.cumsum(distinct) - 1
        span_at = origin[self.job] + np.arange(len(self.job)) - self.span_offsets[self.job]
        self.first, self.last = placed[span_at], placed[span_at + n[self.job]]
        window_at = (origin[self.window_job] + 2 * n[self.window_job]
                     + np.arange(len(self.ws)) - self.window_offsets[self.window_job])
        windows_of_job = w[self.window_job]
        self.window_first = placed[window_at]
        self.window_last = placed[window_at + windows_of_job]
        self.tail_first = placed[window_at + 2 * windows_of_job]
        zero = self.cuts == 0.0  # its sign is the plain sweep's to decide
        self.bad[job_of[distinct][zero]] = True

    def _check_blocking(self) -> None:
        """Marks bad the jobs where a rank has two blocking spans active at once: sorted by
        rank, then start, each span must start at or after the previous one's end;
        offsetting pieces by rank x cuts keeps ranks (and jobs) apart."""
        blocking = self.blocking
        if np.count_nonzero(blocking) < 2:
            return
        ranks = self.ranks
        width = len(self.cuts)
        if int(ranks.max()) >= np.iinfo(np.int64).max // width - 1:
            self.bad[:] = True  # too many ranks to offset: leave all to the plain sweep
            return
        first = ranks * width + self.first[blocking]
        last = ranks * width + self.last[blocking]
        order = np.argsort(first, kind="stable")
        overlap = np.flatnonzero(first[order][1:] < last[order][:-1])
        self.bad[self.job[blocking][order][overlap]] = True

    def _keys(self) -> Ints:
        """Each piece's key: the rules in precedence order."""
        pieces = len(self.cuts) - 1
        keys = np.full(pieces, BY_NOTHING, dtype=np.int64)
        if self.failed.any():
            failed = self.failed
            tail = _summed(self.tail_first[failed], self.window_last[failed], None, pieces)
            keys[tail > 0] = BY_TAIL
        background = ~(self.train | self.blocking)
        for kind, mask in ((BY_BACKGROUND, background), (BY_BLOCKING, self.blocking)):
            if mask.any():
                names_on = _names_on(self.first[mask], self.last[mask], self.name[mask],
                                     pieces)
                on = names_on > 0
                keys[on] = (names_on[on] << KIND_BITS) | kind
        train = self.train
        if train.any():
            code, mixed = _train_codes(self.first[train], self.last[train], self.split[train],
                                       pieces)
            self.bad[self.job[train][mixed]] = True
            on = code >= 0
            keys[on] = (code[on] << KIND_BITS) | BY_TRAIN
        return keys


def _offsets(counts: Ints) -> Ints:
    """Where each of consecutive blocks of ``counts`` items starts, and the end."""
    offsets: Ints = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _summed(first: Ints, last: Ints, weights: Floats | None, count: int) -> Floats:
    """Per piece, the sum of the weights of the intervals ``[first, last)`` holding it."""
    width = count + 1
    summed: Floats = np.cumsum(np.bincount(first, weights=weights, minlength=width)
                               - np.bincount(last, weights=weights, minlength=width))[:count]
    return summed


def _unions(first: Ints, last: Ints) -> tuple[Ints, Bools, Ints, Ints]:
    """Overlapping intervals chained into disjoint unions: (order of the intervals by
    start, whether each starts a new union in that order, union starts, union ends)."""
    order = np.argsort(first, kind="stable")
    starts = first[order]
    reach = np.maximum.accumulate(last[order])
    new = np.empty(len(starts), dtype=np.bool_)
    new[0] = True
    np.greater_equal(starts[1:], reach[:-1], out=new[1:])
    heads = np.flatnonzero(new)
    ends = np.append(heads[1:] - 1, len(starts) - 1)
    return order, new, starts[heads], reach[ends]


def _names_on(first: Ints, last: Ints, name: Ints, count: int) -> Ints:
    """Per piece, the set of phase names with an active span, as bits (``1 << name``).

    Offsetting each span by its name x pieces keeps the names' unions apart; a name's
    unions are disjoint, so adding its bit over each yields the set.
    """
    width = count + 1
    order, new, starts, ends = _unions(name * width + first, name * width + last)
    union_name = name[order][new]
    offset = union_name * width
    bits = np.left_shift(1, union_name).astype(np.float64)
    named: Ints = _summed(starts - offset, ends - offset, bits, count).astype(np.int64)
    return named


def _train_codes(first: Ints, last: Ints, split: Ints, count: int) -> tuple[Ints, Ints]:
    """Per piece, the split code its active train spans share (-1: none active), and the
    spans (indices into the arguments) that overlap one of another split.

    A union of overlapping spans whose splits are not all one holds an overlapping pair
    of two splits, hence a piece with both active.
    """
    order, new, starts, ends = _unions(first, last)
    codes = split[order]
    mixed = order[1:][(codes[1:] != codes[:-1]) & ~new[1:]]
    plus_one = (codes[new] + 1).astype(np.float64)
    coded: Ints = _summed(starts, ends, plus_one, count).astype(np.int64) - 1
    return coded, mixed
