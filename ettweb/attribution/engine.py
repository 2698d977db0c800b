"""The attribution engine: every second of a job's wall time gets exactly one category.

ETT_SPEC §3 is the contract; the comments name the rule each step implements. The engine
imports no Django (only the standard library, numpy through its array path and
``collector.schema``) so the same numbers come out of the offline report, the web workers
and the benchmark.

Input is *validated, normalized* events (``collector.schema.validate_event``). Timelines that
are valid but inconsistent (spans outside their attempt, steps going backwards, overlapping
attempts) never raise: they are clamped into the attempt windows as the spec says.

Shape of the computation, per job:

1. group events by attempt, add each rank's implied train span where a hard kill took the
   open slice and only a heartbeat saw it (§3.3, :mod:`.implied`), and build the attempt
   windows (§3.1, §3.2);
2. give every ``train`` span its repeated share from the job-wide high-water mark (§3.4.1);
3. sweep each window over its sorted span boundaries, classifying each piece (§3.4) and
   merging adjacent pieces whose category *fractions* are identical into ``Segment``s;
4. add ``restart_gap`` segments between windows, weight by GPUs (§3.5) and total up;
5. read each recovery's categories off the segments (§3.8: the restart tax by category) and
   count the anomalies (``ANOMALY_KINDS``): valid timelines a correct trainer would not
   produce, attributed by the rules all the same and shown on the job page.

A job with many spans takes the *array path*: its spans' fields are read once into columns
(:mod:`.columns`), steps 1, 2 and 5 read them there, and step 3 is decided for many jobs
at once on arrays (:mod:`.piece_runs`). It gives exactly the plain path's numbers (the
property tests compare the two); jobs it cannot decide take the plain path.
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from itertools import accumulate, chain, groupby
from math import floor, gcd
from operator import attrgetter, itemgetter, lt
from typing import Any, Final, NamedTuple, Protocol, cast

from collector.schema import FAILED_STATUSES, TRAIN_PHASE

from .columns import Ints, TrainColumns, high_water, span_columns, split_codes, train_columns
from .components import PRODUCTIVE, component_of
from .distinct import hashes_distinct
from .implied import BACKWARDS, implied_in_attempt
from .piece_runs import (
    BY_BACKGROUND,
    BY_BLOCKING,
    BY_TAIL,
    BY_TRAIN,
    KIND_BITS,
    KIND_MASK,
    JobSweep,
    fleet_runs,
)

Event = dict[str, Any]

RESTART_GAP: Final = "restart_gap"
FAILURE: Final = "failure"
REPEATED_TRAINING: Final = "repeated_training"
UNATTRIBUTED: Final = "unattributed"
#: Attempt statuses that exist only in the engine (no ``attempt_end`` was seen).
LOST: Final = "lost"
RUNNING: Final = "running"
#: ``attempt_start`` attrs copied onto the attempt so the web side can group by them.
ATTEMPT_ATTRS: Final = ("model", "team", "cluster")
DAY_S: Final = 86400.0

# A piece's "signature" says how its seconds split into categories, as exact fractions, so two
# adjacent pieces merge only when they split identically:
#   (_ONE, category) | (_SPLIT, (phase, ...)) equal shares | (_TRAIN, repeated_num, den)
_ONE: Final = 0
_SPLIT: Final = 1
_TRAIN: Final = 2
Signature = tuple[Any, ...]
_PRODUCTIVE_SIG: Final[Signature] = (_ONE, PRODUCTIVE)
_REPEATED_SIG: Final[Signature] = (_ONE, REPEATED_TRAINING)
_FAILURE_SIG: Final[Signature] = (_ONE, FAILURE)
_UNATTRIBUTED_SIG: Final[Signature] = (_ONE, UNATTRIBUTED)


@dataclass(frozen=True, slots=True)
class AttemptWindow:
    """One attempt's slice of the job window (§3.1), after clamping.

    ``last_event`` is the attempt's last event other than ``attempt_end``, clamped into the
    window: the failure tail starts there and ``time_to_recover`` is measured from it.
    """

    attempt: int
    start: float
    end: float
    status: str
    gpus: int
    attrs: dict[str, Any] = field(default_factory=dict)
    last_event: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end - self.start


class Segment(NamedTuple):
    """A piece of the job timeline in which every category has a constant share.

    ``shares`` maps category -> seconds of this piece (``productive`` included); a
    ``restart_gap`` segment carries the attempt (and GPUs) that follows the gap. A
    NamedTuple rather than a dataclass: a job has one per piece of its timeline and a
    frozen dataclass costs several times more to create.
    """

    start: float
    end: float
    attempt: int
    gpus: int
    shares: dict[str, float]

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Recovery:
    """One value of ``time_to_recover_s`` (§3.8) and what the restart tax was spent on.

    ``[start, end)`` runs from the failed attempt's last event other than ``attempt_end`` to
    the job's first productive second after it, so ``end - start`` is the time to recover.
    ``by_category`` holds the wall seconds of each category inside that interval (failure
    tail, restart_gap, init phases, repeated_training, ...) and sums to ``end - start``:
    infra owners need the parts of the restart tax, not only its total. Inside a training
    segment the repeated seconds are laid out first, as §3.8 reads a train span, so the
    interval holds no productive seconds when it ends where training turns productive.
    ``by_category_gpu_s`` weighs the same seconds by the GPUs held (§3.5), for fleet days.
    """

    attempt: int
    start: float
    end: float
    by_category: dict[str, float]
    by_category_gpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class JobAttribution:
    """Everything §3 says about one job; the offline report and the web read from this."""

    job: str
    attempts: list[AttemptWindow]
    wall_s: float
    productive_s: float
    wall_gpu_s: float
    productive_gpu_s: float
    lost_s: dict[str, float]
    lost_gpu_s: dict[str, float]
    repeated_steps: int
    time_to_start_s: float | None
    time_to_recover_s: list[float]
    failures: int
    segments: list[Segment]
    duplicates: int = 0
    #: One per value of ``time_to_recover_s``, same order (§3.8 with its parts).
    recoveries: list[Recovery] = field(default_factory=list)
    #: Counts of inconsistent-but-valid things (keys in ``ANOMALY_KINDS``); zeros left out.
    anomalies: dict[str, int] = field(default_factory=dict)
    #: ``repeated_steps`` split by the attempt whose train spans re-did them (the steps each
    #: restart cost); attempts with none left out, so the values sum to ``repeated_steps``.
    repeated_steps_by_attempt: dict[int, int] = field(default_factory=dict)

    @property
    def ett_pct(self) -> float:
        """100 x productive / wall (0.0 for a job with no wall time yet)."""
        return _pct(self.productive_s, self.wall_s)

    def lost_by_component_s(self, mapping: Mapping[str, str] | None = None) -> dict[str, float]:
        """Lost seconds grouped by owning component (§4); ``mapping`` overrides the defaults."""
        return _by_component(self.lost_s, mapping)

    def lost_gpu_by_component_s(
        self, mapping: Mapping[str, str] | None = None
    ) -> dict[str, float]:
        """Lost GPU-seconds grouped by owning component, for fleet-weighted views."""
        return _by_component(self.lost_gpu_s, mapping)

    def per_day_gpu_s(self) -> dict[date, dict[str, float]]:
        """GPU-seconds per UTC day x category (§3.6), ``productive`` included."""
        return per_day(self.segments)


@dataclass(frozen=True, slots=True)
class FleetAttribution:
    """All jobs of one input, sorted by job id; fleet ETT% is GPU-weighted (§1)."""

    jobs: list[JobAttribution]
    duplicates: int = 0

    @property
    def wall_gpu_s(self) -> float:
        return sum((job.wall_gpu_s for job in self.jobs), 0.0)

    @property
    def productive_gpu_s(self) -> float:
        return sum((job.productive_gpu_s for job in self.jobs), 0.0)

    @property
    def ett_pct(self) -> float:
        return _pct(self.productive_gpu_s, self.wall_gpu_s)

    @property
    def lost_gpu_s(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for job in self.jobs:
            for category, seconds in job.lost_gpu_s.items():
                total[category] = total.get(category, 0.0) + seconds
        return total


def _pct(part: float, whole: float) -> float:
    """A percentage kept inside [0, 100] despite float drift; an empty whole reads as 0."""
    if whole <= 0.0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * part / whole))


def _by_component(
    seconds: Mapping[str, float], mapping: Mapping[str, str] | None
) -> dict[str, float]:
    grouped: dict[str, float] = {}
    for category, value in seconds.items():
        component = component_of(category, mapping)
        grouped[component] = grouped.get(component, 0.0) + value
    return grouped


def per_day(
    segments: Iterable[Segment], *, gpu_weighted: bool = True
) -> dict[date, dict[str, float]]:
    """Split segments at UTC midnight into day -> category -> (GPU-)seconds (§3.6).

    A segment's shares are uniform over its length, so the part falling on a day is the
    share x overlap / duration; this keeps day totals equal to the job totals.
    """
    days: dict[date, dict[str, float]] = {}
    for seg in segments:
        duration = seg.end - seg.start
        if duration <= 0.0:
            continue
        weight = seg.gpus if gpu_weighted else 1
        cursor = seg.start
        while cursor < seg.end:
            day_start = (cursor // DAY_S) * DAY_S
            stop = min(seg.end, day_start + DAY_S)
            scale = weight * (stop - cursor) / duration
            bucket = days.setdefault(datetime.fromtimestamp(day_start, UTC).date(), {})
            for category, seconds in seg.shares.items():
                bucket[category] = bucket.get(category, 0.0) + seconds * scale
            cursor = stop
    return days


def attribute(events: Iterable[Event]) -> FleetAttribution:
    """Attribute every job in ``events`` (validated, normalized), jobs sorted by id.

    Event ids are unique across the fleet, so a repeated id is dropped wherever it appears
    (the first occurrence is kept) and counted in ``duplicates``.
    """
    events = events if isinstance(events, list) else list(events)
    dups_by_job: dict[str, int] = {}
    with gc_paused():
        if hashes_distinct(map(_ID, events), len(events)):  # the common case: no repeats
            by_job = _grouped(events)
        else:
            kept, dups_by_job = _group_by_job_dropping_repeats(events)
            by_job = _grouped(list(chain.from_iterable(kept.values())))
        jobs = _attribute_jobs([(job, by_job[job], dups_by_job.get(job, 0))
                                for job in sorted(by_job)])
    return FleetAttribution(jobs=jobs, duplicates=sum(dups_by_job.values()))


#: One job's events per attempt: (spans, marks), each in input order.
Attempts = dict[int, tuple[list[Event], list[Event]]]


def _grouped(events: list[Event]) -> dict[str, Attempts]:
    """Each job's spans and marks per attempt. Runs of one job, attempt and kind (how files
    and batches arrive) move in one step, and each event is read once to find its run."""
    by_job: dict[str, Attempts] = {}
    for (job, attempt, kind), run in groupby(events, _RUN_KEY):
        attempts = by_job.get(job)
        if attempts is None:
            by_job[job] = attempts = {}
        kinds = attempts.get(attempt)
        if kinds is None:
            attempts[attempt] = kinds = ([], [])
        kinds[0 if kind == _SPAN_KIND else 1].extend(run)
    return by_job


def _group_by_job_dropping_repeats(
    events: list[Event],
) -> tuple[dict[str, list[Event]], dict[str, int]]:
    """Events per job keeping the first copy of each id; repeats counted on its first job."""
    by_job: dict[str, list[Event]] = {}
    owner: dict[str, str] = {}  # event id -> job of its first occurrence
    dups_by_job: dict[str, int] = {}
    for event in events:
        event_id = event["id"]
        first_job = owner.get(event_id)
        if first_job is not None:
            dups_by_job[first_job] = dups_by_job.get(first_job, 0) + 1
            continue
        owner[event_id] = event["job"]
        by_job.setdefault(event["job"], []).append(event)
    return by_job, dups_by_job


def attribute_job(events: Iterable[Event], *, chunk_s: float | None = None) -> JobAttribution:
    """Attribute ONE job's validated, normalized events; repeated ids count once.

    ``chunk_s`` sweeps each attempt in time chunks of that length (aligned to multiples of
    it, as UTC hours and days are) instead of at once, each chunk seeing only the spans that
    overlap it (:func:`sweep_chunk`): the same numbers up to float rounding, segments cut at
    chunk boundaries. ``ettweb.attribution.chunk_sweep`` builds the stored, incremental
    attribution on the same sweep.

    Raises ValueError when the events are empty or belong to more than one job: that is a
    caller bug, not bad data (bad data is rejected earlier by ``collector.schema``).
    """
    if chunk_s is not None and not chunk_s > 0:
        raise ValueError(f"chunk_s must be positive, not {chunk_s}")
    unique: dict[str, Event] = {}
    duplicates = 0
    for event in events:
        if event["id"] in unique:
            duplicates += 1
        else:
            unique[event["id"]] = event
    jobs = {event["job"] for event in unique.values()}
    if len(jobs) != 1:
        raise ValueError(f"attribute_job needs the events of exactly one job, got {len(jobs)}")
    with gc_paused():
        job = jobs.pop()
        return _attribute_jobs([(job, _grouped(list(unique.values()))[job], duplicates)],
                               chunk_s)[0]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a timeline is built.

    Attribution allocates one small dict and tuple per piece of timeline and none of them
    form reference cycles, yet every allocation burst triggers full collections that
    rescan all of them: pausing roughly doubled throughput in measurements. The previous
    state is restored, so a caller that disabled GC keeps it disabled.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _age_young_objects()
            gc.enable()


#: Objects made while paused from which resuming ages them (:func:`_age_young_objects`)
#: rather than letting a collection scan them: below, that scan is a few milliseconds.
AGE_AFTER_OBJECTS = 100_000


def _age_young_objects() -> None:
    """Move every tracked object into the oldest generation without scanning it, when the
    pause made many.

    Why: resuming the collector lets the next allocation collect the young generation,
    which now holds everything made while paused (a fleet's segments and totals): a scan of
    live results that frees nothing, and that may cascade into a full collection costing a
    fifth of a fleet's attribution. ``gc.freeze`` then ``gc.unfreeze`` hands them to the
    oldest generation in two list splices; full collections still see them. Short pauses
    (one job's refresh) are left to the usual collection, so the host's young garbage is
    collected as usual; and so is a host that froze objects (e.g. before forking workers):
    unfreezing would thaw them.
    """
    if gc.get_count()[0] > AGE_AFTER_OBJECTS and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def _attribute_jobs(jobs: Sequence[tuple[str, Attempts, int]],
                    chunk_s: float | None = None) -> list[JobAttribution]:
    """Attribute jobs whose events are already deduplicated: ``(job, its events per
    attempt, duplicates)``.

    Batch by batch of jobs (``ARRAY_BATCH_SPANS`` spans): each job's facts first
    (:func:`_job_parts`), then the sweep of the batch's jobs at once on arrays
    (:mod:`.piece_runs`: numpy's cost is per call), then each job's totals. Jobs too small
    to gain from arrays, or that the array sweep cannot decide, take the plain sweep.
    """
    attributed: list[JobAttribution] = []
    for batch in _batches(jobs):
        parts = [_job_parts(job, attempts, duplicates) for job, attempts, duplicates in batch]
        runs = _sweep_on_arrays(parts) if chunk_s is None else [None] * len(parts)
        attributed += [_attributed(part, found, chunk_s)
                       for part, found in zip(parts, runs, strict=True)]
    return attributed


def _batches(jobs: Sequence[tuple[str, Attempts, int]],
             ) -> Iterator[Sequence[tuple[str, Attempts, int]]]:
    """Consecutive jobs of about ``ARRAY_BATCH_SPANS`` spans together (a job more)."""
    first = spans = 0
    for index, (_, attempts, _) in enumerate(jobs):
        spans += sum(len(attempt_spans) for attempt_spans, _ in attempts.values())
        if spans >= ARRAY_BATCH_SPANS:
            yield jobs[first:index + 1]
            first, spans = index + 1, 0
    if first < len(jobs):
        yield jobs[first:]


class _JobParts:
    """What one job's attribution needs besides its sweep: its attempts and windows, each
    train span's split (§3.4.1), the repeated steps (§3.7), the recoveries and the time to
    start (§3.8), the anomalies; and, when the job is swept on arrays, what that reads."""

    __slots__ = ("anomalies", "codes", "duplicates", "job", "ordered", "recovered",
                 "repeated_by_attempt", "sigs", "splits", "sweep", "time_to_start", "train",
                 "windows")

    def __init__(self, job: str, duplicates: int, ordered: list[_Attempt],
                 windows: list[AttemptWindow], train: list[Event]) -> None:
        self.job, self.duplicates = job, duplicates
        self.ordered, self.windows, self.train = ordered, windows, train
        self.sigs: dict[str, Signature] | None = None
        self.codes: Ints | None = None  # or each train span's split as a place in splits
        self.splits: list[Signature] = []
        self.repeated_by_attempt: dict[int, int] = {}
        self.recovered: list[tuple[int, float, float]] = []
        self.time_to_start: float | None = None
        self.anomalies: dict[str, int] = {}
        self.sweep: JobSweep | None = None

    def signatures(self) -> dict[str, Signature]:
        """Each train span's split by id (the plain sweep's input), built when asked."""
        if self.sigs is None:
            codes = cast(Ints, self.codes).tolist()
            self.sigs = {span["id"]: self.splits[code]
                         for span, code in zip(self.train, codes, strict=True)}
        return self.sigs


#: Spans from which a job is attributed on arrays (:mod:`.columns`, :mod:`.piece_runs`):
#: below, numpy's cost per call outweighs what it saves.
ARRAY_MIN_SPANS = 64
#: Spans of the jobs attributed together, swept on arrays at once: bounds the arrays'
#: memory (a few MB); batches this size sweep as fast as a whole fleet at once, their
#: arrays and events staying in cache.
ARRAY_BATCH_SPANS = 1 << 15


def _job_parts(job: str, attempts: Attempts, duplicates: int) -> _JobParts:
    """A job's facts, on arrays when it is big enough and the arrays can decide them."""
    by_attempt: list[_AttemptEvents] = []
    backwards = 0
    for attempt in sorted(attempts):
        spans, marks = attempts[attempt]
        implied, went_back = implied_in_attempt(job, attempt, spans, marks)  # §3 rule 3
        backwards += went_back
        by_attempt.append((attempt, spans + implied if implied else spans, marks))
    found = _array_parts(job, by_attempt, duplicates)
    part = found if found is not None else _plain_parts(job, by_attempt, duplicates)
    if backwards:
        part.anomalies = {**part.anomalies, BACKWARDS: backwards}
    return part


#: An attempt's number, spans and marks.
_AttemptEvents = tuple[int, list[Event], list[Event]]


def _plain_parts(job: str, by_attempt: list[_AttemptEvents], duplicates: int) -> _JobParts:
    """A job's facts read event by event."""
    ordered = [_Attempt.of(attempt, spans, marks) for attempt, spans, marks in by_attempt]
    train = [span for attempt in ordered for span in attempt.spans
             if span["phase"] == TRAIN_PHASE]
    windows = attempt_windows(ordered)
    part = _JobParts(job, duplicates, ordered, windows, train)
    part.sigs, part.repeated_by_attempt = _train_signatures(train)
    part.recovered = _times_to_recover(windows, ordered, part.sigs)
    part.time_to_start = _time_to_start(windows, train)
    part.anomalies = _anomalies(ordered, windows)
    return part


def _array_parts(job: str, by_attempt: list[_AttemptEvents],
                 duplicates: int) -> _JobParts | None:
    """A job's facts from its spans' columns (each field read once), or ``None`` when it
    is too small for arrays to pay or the plain path must decide (see :mod:`.columns`)."""
    spans = [span for _, attempt_spans, _ in by_attempt for span in attempt_spans]
    if len(spans) < ARRAY_MIN_SPANS:
        return None
    columns = span_columns(spans, [len(attempt_spans) for _, attempt_spans, _ in by_attempt])
    trains = train_columns(columns) if columns is not None else None
    redo = high_water(trains) if trains is not None else None
    if columns is None or trains is None or redo is None:
        return None
    firsts, lasts = columns.extents()
    ordered = [_Attempt(attempt, attempt_spans, marks, first, last) for
               (attempt, attempt_spans, marks), first, last in zip(by_attempt, firsts, lasts,
                                                                   strict=True)]
    windows = attempt_windows(ordered)
    part = _JobParts(job, duplicates, ordered, windows, trains.spans)
    redone = _Redone(trains, *redo, [attempt.attempt for attempt in ordered])
    part.codes, part.splits = redone.codes, redone.splits
    part.repeated_by_attempt = redone.repeated_by_attempt
    part.recovered = _times_to_recover_on(windows, trains, redone)
    part.time_to_start = _time_to_start_at(
        windows, float(trains.start.min()) if len(trains.spans) else None)
    outside = (columns.outside([window.start for window in windows],
                               [window.end for window in windows])
               if any(attempt.first < window.start or attempt.last > window.end
                      for attempt, window in zip(ordered, windows, strict=True)) else None)
    part.anomalies = _anomalies(ordered, windows, trains.steps_by_attempt(), outside)
    part.sweep = JobSweep(starts=[window.start for window in windows],
                          ends=[window.end for window in windows],
                          tails=[window.last_event for window in windows],
                          failed=[window.status in FAILED_STATUSES for window in windows],
                          columns=columns, codes=redone.codes, splits=list(redone.splits))
    return part


class _Redone:
    """The splits (§3.4.1) of a job's train spans, given the indices of those re-doing
    steps and their H (:func:`high_water`; the others are all productive), and the
    repeated steps per attempt (§3.7). Spans re-doing the same steps with the same H
    (ranks training side by side) share the arithmetic. ``codes`` holds each train span's
    split as its place in ``splits`` (0: productive)."""

    def __init__(self, train: TrainColumns, indices: Ints, highs: Ints,
                 attempts: list[int]) -> None:
        keys = list(zip(train.step_start[indices].tolist(), train.step_end[indices].tolist(),
                        highs.tolist(), strict=True))
        code_of: dict[Signature, int] = {_PRODUCTIVE_SIG: 0}
        found: dict[tuple[int, int, int], tuple[int, int]] = {}  # key -> (repeated, code)
        for key in dict.fromkeys(keys):
            repeated, sig = _train_split(*key)
            found[key] = (repeated, code_of.setdefault(sig, len(code_of)))
        self.splits = list(code_of)
        self.codes = split_codes(len(train.spans), indices,
                                 [found[key][1] for key in keys])
        by_attempt: dict[int, int] = {}
        for (place, key), count in Counter(zip(train.attempt[indices].tolist(), keys,
                                               strict=True)).items():
            repeated = found[key][0]
            if repeated:
                attempt = attempts[place]
                by_attempt[attempt] = by_attempt.get(attempt, 0) + repeated * count
        self.repeated_by_attempt = dict(sorted(by_attempt.items()))


#: One job's runs of pieces per window: (where each run starts, its split).
_WindowRuns = list[tuple[list[float], list[Signature]]]


def _sweep_on_arrays(parts: list[_JobParts]) -> list[_WindowRuns | None]:
    """Each job's runs of pieces per window as (run starts, splits), decided on arrays
    (:func:`fleet_runs`) for all at once; ``None`` for a job the plain sweep must do."""
    found: list[_WindowRuns | None] = [None] * len(parts)
    taken = [index for index, part in enumerate(parts) if part.sweep is not None]
    if not taken:
        return found
    sweeps = [cast(JobSweep, parts[index].sweep) for index in taken]
    for index, runs in zip(taken, fleet_runs(sweeps), strict=True):
        if runs is not None:
            known: dict[int, Signature] = {}
            splits = cast(list[Signature], runs.splits)
            found[index] = [(starts, _run_splits(keys, runs.names, splits, known))
                            for starts, keys in runs.runs]
    return found


def _attributed(part: _JobParts, runs: _WindowRuns | None,
                chunk_s: float | None) -> JobAttribution:
    """One job's attribution from its facts and, when the array sweep decided it, its runs."""
    windows, recovered = part.windows, part.recovered
    totals = _Totals()
    previous: AttemptWindow | None = None
    for index, (window, attempt) in enumerate(zip(windows, part.ordered, strict=True)):
        if previous is not None and window.start > previous.end:
            gap = window.start - previous.end
            totals.segments.append(Segment(previous.end, window.start, window.attempt,
                                           window.gpus, {RESTART_GAP: gap}))
            totals.add({(_ONE, RESTART_GAP): gap}, window.gpus)
        if runs is not None:
            durations = _emit_runs(window, *runs[index], totals.segments)
        elif chunk_s is None:
            durations = _sweep(window, attempt.spans, part.signatures(), totals.segments)
        else:
            durations = _sweep_in_chunks(window, attempt.spans, part.signatures(),
                                         totals.segments, chunk_s)
        totals.add(durations, window.gpus)
        previous = window
    return JobAttribution(
        job=part.job,
        attempts=windows,
        wall_s=windows[-1].end - windows[0].start,
        productive_s=totals.seconds.pop(PRODUCTIVE, 0.0),
        wall_gpu_s=totals.wall_gpu_s,
        productive_gpu_s=totals.gpu_seconds.pop(PRODUCTIVE, 0.0),
        lost_s={k: v for k, v in totals.seconds.items() if v != 0.0},
        lost_gpu_s={k: v for k, v in totals.gpu_seconds.items() if v != 0.0},
        repeated_steps=sum(part.repeated_by_attempt.values()),
        time_to_start_s=part.time_to_start,
        time_to_recover_s=[end - start for _, start, end in recovered],
        failures=sum(1 for window in windows if window.status in FAILED_STATUSES),
        segments=totals.segments,
        duplicates=part.duplicates,
        recoveries=[_recovery(attempt, start, end, totals.segments)
                    for attempt, start, end in recovered],
        anomalies=part.anomalies,
        repeated_steps_by_attempt=part.repeated_by_attempt,
    )


class _Attempt:
    """What one attempt's events say, before windows are clamped against each other.

    Built with bulk comprehensions rather than per-event method calls: ingestion is the
    hottest path of the offline report.
    """

    __slots__ = ("attempt", "end_mark", "first", "last", "last_activity", "marks", "spans",
                 "start_mark")

    def __init__(self, attempt: int, spans: list[Event], marks: list[Event],
                 span_first: float, span_last: float) -> None:
        """``span_first``/``span_last``: the spans' earliest start and latest end (inf and
        -inf when there are none)."""
        self.attempt, self.spans, self.marks = attempt, spans, marks
        self.first = min(span_first, min(map(_TS, marks), default=_INF))
        self.last = max(span_last, max(map(_TS, marks), default=-_INF))
        # The latest event other than attempt_end: where the failure tail starts.
        self.last_activity = max(
            span_last, max((m["ts"] for m in marks if m["mark"] != "attempt_end"), default=-_INF)
        )
        # Two start marks: the earliest wins; two end marks (e.g. one per rank): the latest
        # wins, so no rank's teardown is cut. Ties break on the unique id, never on input order.
        self.start_mark: tuple[float, str, dict[str, Any]] | None = min(
            ((m["ts"], m["id"], m["attrs"]) for m in marks if m["mark"] == "attempt_start"),
            key=_ts_id, default=None,
        )
        self.end_mark: tuple[float, str, str] | None = max(
            ((m["ts"], m["id"], m["attrs"]["status"]) for m in marks
             if m["mark"] == "attempt_end"),
            default=None,
        )

    @classmethod
    def of(cls, attempt: int, spans: list[Event], marks: list[Event]) -> _Attempt:
        """The attempt read from its spans and marks."""
        return cls(attempt, spans, marks, min(map(_START, spans), default=_INF),
                   max(map(_END, spans), default=-_INF))

    @property
    def start(self) -> float:
        return self.start_mark[0] if self.start_mark else self.first


_INF: Final = float("inf")
_START: Final = itemgetter("start")
_END: Final = itemgetter("end")
_TS: Final = itemgetter("ts")
_ID: Final = itemgetter("id")
_RUN_KEY: Final = itemgetter("job", "attempt", "kind")
_SPAN_KIND: Final = "span"


def _ts_id(mark: tuple[float, str, dict[str, Any]]) -> tuple[float, str]:
    return mark[0], mark[1]



class _Totals:
    """Accumulates per-category seconds and GPU-seconds, and the job's segments."""

    __slots__ = ("gpu_seconds", "seconds", "segments", "wall_gpu_s")

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.seconds: dict[str, float] = {}
        self.gpu_seconds: dict[str, float] = {}
        self.wall_gpu_s = 0.0

    def add(self, durations: Mapping[Signature, float], gpus: int) -> None:
        """Add one attempt's (or gap's) seconds per signature, weighted by its GPUs (§3.5)."""
        for sig, duration in durations.items():
            self.wall_gpu_s += duration * gpus
            for category, seconds in _shares(sig, duration).items():
                self.seconds[category] = self.seconds.get(category, 0.0) + seconds
                self.gpu_seconds[category] = self.gpu_seconds.get(category, 0.0) + seconds * gpus


def _train_signatures(train: list[Event], history: list[Event] | None = None, floor: int = 0,
                      ) -> tuple[dict[str, Signature], dict[int, int]]:
    """§3.4.1 and §3.7: each train span's split and the job's repeated steps per attempt.

    H of a span = max step_end of the job's train spans that ended at or before its start,
    across attempts and ranks: the steps a restart or rollback redoes. Sorted ends + prefix
    maxima make each lookup a bisection instead of a scan. A zero-length span ends at its
    own start; it must not count as its own history, so spans ending exactly at the query
    time are looked at one by one (rare). ``history`` (default: ``train``) and ``floor``
    (an H every span starts from) serve one chunk of a job (``chunks``): its spans, read
    against the spans ending in it and the high-water mark carried in.
    """
    by_end = sorted(train if history is None else history, key=_END)
    ends = [span["end"] for span in by_end]
    prefix = list(accumulate((span["step_end"] for span in by_end), max))
    sigs: dict[str, Signature] = {}
    by_attempt: dict[int, int] = {}
    for span in train:
        start = span["start"]
        hi = bisect_right(ends, start)
        if span["end"] > start:
            high = prefix[hi - 1] if hi else 0
        else:
            lo = bisect_left(ends, start)
            high = prefix[lo - 1] if lo else 0
            for other in by_end[lo:hi]:
                if other is not span and other["step_end"] > high:
                    high = other["step_end"]
        high = max(high, floor)
        if high <= span["step_start"]:  # the common case: all new steps
            sigs[span["id"]] = _PRODUCTIVE_SIG
            continue
        split_repeated(span, high, sigs, by_attempt)
    return sigs, dict(sorted(by_attempt.items()))


def split_repeated(span: Event, high: int, sigs: dict[str, Signature],
                   by_attempt: dict[int, int]) -> None:
    """A train span with H above its first step: its split into ``sigs`` and its repeated
    steps onto its attempt's count (§3.4.1, §3.7)."""
    repeated, sigs[span["id"]] = _train_split(span["step_start"], span["step_end"], high)
    if repeated:
        by_attempt[span["attempt"]] = by_attempt.get(span["attempt"], 0) + repeated


def _train_split(step_start: int, step_end: int, high_water: int) -> tuple[int, Signature]:
    """f = clamp((min(s1, H) - s0) / (s1 - s0), 0, 1), kept as an exact reduced fraction."""
    steps = step_end - step_start
    repeated = max(0, min(step_end, high_water) - step_start)
    if repeated == 0 or steps == 0:
        return repeated, _PRODUCTIVE_SIG
    if repeated >= steps:
        return repeated, _REPEATED_SIG
    g = gcd(repeated, steps)
    return repeated, (_TRAIN, repeated // g, steps // g)


class AttemptFacts(Protocol):
    """What the windows are built from: an attempt's marks and the extent of its events
    (:class:`_Attempt` from the events, or the chunked attribution's fold of summaries)."""

    attempt: int
    last: float
    last_activity: float
    start_mark: tuple[float, str, dict[str, Any]] | None
    end_mark: tuple[float, str, str] | None

    @property
    def start(self) -> float: ...


def attempt_windows(ordered: Sequence[AttemptFacts]) -> list[AttemptWindow]:
    """§3.1/§3.2: one window per attempt, in attempt order, never overlapping.

    A window runs from the attempt_start mark (else the earliest event) to the attempt_end
    mark (else the latest event) and is cut at the next attempt's start. When clocks
    disagree with attempt numbers (an attempt starting before the previous one), the later
    attempt is moved to start where the previous ended: windows stay ordered and disjoint,
    so categories always add up to the job's wall time.
    """
    windows: list[AttemptWindow] = []
    gpus = 1
    previous_end: float | None = None
    for index, attempt in enumerate(ordered):
        start = attempt.start
        end = attempt.end_mark[0] if attempt.end_mark else attempt.last
        if previous_end is not None:
            start = max(start, previous_end)
        if index + 1 < len(ordered):
            end = min(end, ordered[index + 1].start)
        end = max(start, end)
        attrs = attempt.start_mark[2] if attempt.start_mark else {}
        gpus = attrs.get("gpus", gpus)  # default: the previous attempt's, else 1 (§2)
        windows.append(AttemptWindow(
            attempt=attempt.attempt,
            start=start,
            end=end,
            status=_status(attempt, is_last=index + 1 == len(ordered)),
            gpus=gpus,
            attrs={key: attrs[key] for key in ATTEMPT_ATTRS if key in attrs},
            last_event=min(max(attempt.last_activity, start), end),
        ))
        previous_end = end
    return windows


def _status(attempt: AttemptFacts, *, is_last: bool) -> str:
    if attempt.end_mark is not None:
        return attempt.end_mark[2]
    return RUNNING if is_last else LOST


def _sweep(window: AttemptWindow, spans: list[Event], sigs: Mapping[str, Signature],
           segments: list[Segment],
           nesting: tuple[float, float] | None = None) -> dict[Signature, float]:
    """§3.4: cut the window at span boundaries, classify each piece, merge equal neighbours.

    Appends the merged pieces to ``segments`` and returns seconds per signature. The active
    spans are maintained incrementally while walking the sorted cut points: train spans in a
    heap ordered by (rank, start, id), so the lowest rank's earliest span is on top (stale
    entries are dropped lazily); blocking spans per rank, whose innermost phases are
    recomputed only for the ranks that changed; background spans as a phase counter.
    ``nesting``: the bounds spans are clamped to when deciding which is innermost (§3.4.2:
    the attempt window's), when ``window`` is only a chunk of it (:func:`sweep_chunk`).
    """
    ws, we = window.start, window.end
    durations: dict[Signature, float] = {}
    if we <= ws:
        return durations
    live, cs, ce = _clamped(spans, ws, we)
    blocking_cs, blocking_ce = cs, ce
    if nesting is not None:
        low, high = nesting
        blocking_cs, blocking_ce = list(map(_START, live)), list(map(_END, live))
        if live and (min(blocking_cs) < low or max(blocking_ce) > high):
            blocking_cs = [min(max(start, low), high) for start in blocking_cs]
            blocking_ce = [min(max(end, low), high) for end in blocking_ce]
    n = len(live)
    cuts = sorted({ws, we, window.last_event, *cs, *ce})
    by_start = sorted(range(n), key=cs.__getitem__)
    by_end = sorted(range(n), key=ce.__getitem__)
    start_at = [cs[i] for i in by_start]
    end_at = [ce[i] for i in by_end]
    train_sig = [sigs.get(span["id"]) if span["phase"] == TRAIN_PHASE else None
                 for span in live]
    on = bytearray(n)
    heap: list[tuple[int, float, str, int]] = []
    blocking = _Blocking(live, blocking_cs, blocking_ce)
    background: dict[str, int] = {}
    failed, tail = window.status in FAILED_STATUSES, window.last_event
    attempt, gpus = window.attempt, window.gpus
    current: Signature | None = None
    current_start = ws
    next_start = next_end = 0
    push, pop = heapq.heappush, heapq.heappop
    for at in cuts[:-1]:
        while next_end < n and end_at[next_end] <= at:
            i = by_end[next_end]
            next_end += 1
            if train_sig[i] is not None:
                on[i] = 0
            elif live[i]["blocking"]:
                blocking.remove(i)
            else:
                _count(background, live[i]["phase"], -1)
        while next_start < n and start_at[next_start] <= at:
            i = by_start[next_start]
            next_start += 1
            span = live[i]
            if train_sig[i] is not None:
                on[i] = 1
                push(heap, (span["rank"], span["start"], span["id"], i))
            elif span["blocking"]:
                blocking.add(i)
            else:
                _count(background, span["phase"], 1)
        while heap and not on[heap[0][3]]:
            pop(heap)
        if heap:
            sig: Signature = train_sig[heap[0][3]] or _PRODUCTIVE_SIG
        elif blocking.phases():
            sig = blocking.signature()
        elif background:
            sig = _split(background)
        elif failed and at >= tail:
            sig = _FAILURE_SIG
        else:
            sig = _UNATTRIBUTED_SIG
        if sig is not current and sig != current:  # shared signature objects: identity first
            if current is not None:  # inlined _emit: this is the hottest line of the report
                length = at - current_start
                durations[current] = durations.get(current, 0.0) + length
                shares = {current[1]: length} if current[0] == _ONE else _shares(current, length)
                segments.append(Segment(current_start, at, attempt, gpus, shares))
            current, current_start = sig, at
    if current is not None:
        _emit(segments, durations, current, current_start, we, attempt, gpus)
    return durations


def _run_splits(keys: list[int], names: list[str], splits: list[Signature],
                known: dict[int, Signature]) -> list[Signature]:
    """The split each run key of :func:`fleet_runs` stands for (``known``: those found)."""
    for key in keys:
        if key in known:
            continue
        kind, value = key & KIND_MASK, key >> KIND_BITS
        if kind == BY_TRAIN:
            sig = splits[value]
        elif kind in (BY_BLOCKING, BY_BACKGROUND):
            sig = _split(dict.fromkeys((name for code, name in enumerate(names)
                                        if value >> code & 1), 1))
        else:
            sig = _FAILURE_SIG if kind == BY_TAIL else _UNATTRIBUTED_SIG
        known[key] = sig
    return list(map(known.__getitem__, keys))


def _emit_runs(window: AttemptWindow, starts: list[float], splits: list[Signature],
               segments: list[Segment]) -> dict[Signature, float]:
    """Runs of pieces as segments, neighbours with equal splits merged, as the plain sweep
    emits them; returns seconds per split."""
    durations: dict[Signature, float] = {}
    attempt, gpus = window.attempt, window.gpus
    current: Signature | None = None
    current_start = window.start
    append, new = segments.append, tuple.__new__  # a NamedTuple's own __new__ is Python
    for at, sig in zip(starts, splits, strict=True):
        if sig is not current and sig != current:
            if current is not None:
                length = at - current_start
                durations[current] = durations.get(current, 0.0) + length
                shares = {current[1]: length} if current[0] == _ONE else _shares(current, length)
                append(new(Segment, (current_start, at, attempt, gpus, shares)))
            current, current_start = sig, at
    if current is not None:
        _emit(segments, durations, current, current_start, window.end, attempt, gpus)
    return durations


def sweep_chunk(window: AttemptWindow, spans: Iterable[Event], sigs: Mapping[str, Signature],
                start: float, end: float, segments: list[Segment]) -> dict[Signature, float]:
    """The sweep of ``window`` restricted to [start, end): what :func:`_sweep` gives there,
    from only the spans that overlap it.

    Why this holds: a piece's signature depends on the spans active at that instant, the
    train spans' signatures (``sigs``, from the step high-water mark) and the window's status
    and failure tail, never on pieces elsewhere. Which of a rank's nested spans is innermost
    is still decided on their extents clamped to the whole window (§3.4.2), not to the
    chunk, where two spans could look alike. The tail is clamped into the chunk: a tail
    before it makes every instant of the chunk "after the tail", one past it none.
    """
    a, b = max(window.start, start), min(window.end, end)
    if b <= a:
        return {}
    sub = replace(window, start=a, end=b, last_event=min(max(window.last_event, a), b))
    return _sweep(sub, [span for span in spans if span["start"] < b and span["end"] > a],
                  sigs, segments, nesting=(window.start, window.end))


def _sweep_in_chunks(window: AttemptWindow, spans: list[Event], sigs: Mapping[str, Signature],
                     segments: list[Segment], chunk_s: float) -> dict[Signature, float]:
    """Seconds per signature of ``window``, chunk by chunk (multiples of ``chunk_s``)."""
    durations: dict[Signature, float] = {}
    index = floor(window.start / chunk_s)
    while index * chunk_s < window.end:
        for sig, seconds in sweep_chunk(window, spans, sigs, index * chunk_s,
                                        (index + 1) * chunk_s, segments).items():
            durations[sig] = durations.get(sig, 0.0) + seconds
        index += 1
    return durations


def _clamped(spans: list[Event], ws: float, we: float,
             ) -> tuple[list[Event], list[float], list[float]]:
    """Spans clamped into [ws, we]; those left with no length cannot be active anywhere.

    Most attempts have every span inside their window and none of zero length: that case
    is proved with C-level passes and skips the per-span clamping.
    """
    cs = list(map(_START, spans))
    ce = list(map(_END, spans))
    if spans and min(cs) >= ws and max(ce) <= we and all(map(lt, cs, ce)):
        return spans, cs, ce
    live: list[Event] = []
    cs, ce = [], []
    for span in spans:
        start, end = span["start"], span["end"]
        start = ws if start < ws else we if start > we else start
        end = ws if end < ws else we if end > we else end
        if end > start:
            live.append(span)
            cs.append(start)
            ce.append(end)
    return live, cs, ce


def _emit(segments: list[Segment], durations: dict[Signature, float], sig: Signature,
          start: float, end: float, attempt: int, gpus: int) -> None:
    duration = end - start
    durations[sig] = durations.get(sig, 0.0) + duration
    segments.append(Segment(start, end, attempt, gpus, _shares(sig, duration)))


def _count(counter: dict[str, int], key: str, delta: int) -> None:
    left = counter.get(key, 0) + delta
    if left:
        counter[key] = left
    else:
        del counter[key]


class _Blocking:
    """Active blocking spans per rank and the distinct innermost phases across ranks.

    A rank going from no active blocking span to one, or from one to none, updates the
    phase counts at once (the common case: each rank runs its init phases one after the
    other); anything else marks the rank dirty for ``phases`` to recompute. ``signature``
    re-derives the equal-share split only after the set of phase names changed (equal
    shares go to distinct names, however many ranks run each).
    """

    __slots__ = ("ce", "changed", "counts", "cs", "dirty", "live", "rank_phases", "ranks",
                 "sig")

    def __init__(self, live: list[Event], cs: list[float], ce: list[float]) -> None:
        self.live, self.cs, self.ce = live, cs, ce
        self.ranks: dict[int, list[int]] = {}
        self.rank_phases: dict[int, Collection[str]] = {}
        self.counts: dict[str, int] = {}  # phase -> ranks having it innermost
        self.dirty: set[int] = set()
        self.changed = False
        self.sig: Signature = _UNATTRIBUTED_SIG

    def add(self, index: int) -> None:
        span = self.live[index]
        rank = span["rank"]
        active = self.ranks.get(rank)
        if active is None:
            self.ranks[rank] = active = []
        active.append(index)
        if len(active) == 1 and rank not in self.dirty:
            phase = span["phase"]
            self.rank_phases[rank] = (phase,)
            ranks_in_phase = self.counts.get(phase, 0)
            self.counts[phase] = ranks_in_phase + 1
            if not ranks_in_phase:
                self.changed = True  # a new phase name: the split changes
        else:
            self.dirty.add(rank)

    def remove(self, index: int) -> None:
        rank = self.live[index]["rank"]
        active = self.ranks[rank]
        active.remove(index)
        if active or rank in self.dirty:
            self.dirty.add(rank)
            return
        counts = self.counts
        for phase in self.rank_phases.pop(rank, ()):
            left = counts[phase] - 1
            if left:
                counts[phase] = left
            else:
                del counts[phase]
                self.changed = True  # a phase name left: the split changes

    def signature(self) -> Signature:
        """The split of a piece among the active phases (call after ``phases``)."""
        if self.changed:
            self.sig = _split(self.counts)
            self.changed = False
        return self.sig

    def phases(self) -> dict[str, int]:
        """The distinct innermost phases now active (refreshing only the ranks that changed).

        Counter updates are inlined and a rank with one active span skips the innermost
        search: this runs at nearly every cut of a multi-rank init phase.
        """
        if self.dirty:
            counts = self.counts
            for rank in self.dirty:
                for phase in self.rank_phases.pop(rank, ()):
                    left = counts[phase] - 1
                    if left:
                        counts[phase] = left
                    else:
                        del counts[phase]
                active = self.ranks.get(rank)
                if not active:
                    continue
                if len(active) == 1:
                    phases: Collection[str] = (self.live[active[0]]["phase"],)
                else:
                    phases = _innermost_phases(
                        [(self.cs[i], self.ce[i], self.live[i]["phase"]) for i in active])
                self.rank_phases[rank] = phases
                for phase in phases:
                    counts[phase] = counts.get(phase, 0) + 1
            self.dirty.clear()
            self.changed = True
        return self.counts


def _split(phases: Mapping[str, int]) -> Signature:
    """Equal shares among distinct phase names (a lone phase takes the whole piece)."""
    if len(phases) == 1:
        (phase,) = phases
        return (_ONE, _phase_category(phase))
    return (_SPLIT, tuple(sorted(_phase_category(phase) for phase in phases)))


def _phase_category(phase: str) -> str:
    """A non-train span may not claim productive time by naming itself ``productive``."""
    return UNATTRIBUTED if phase == PRODUCTIVE else phase


def _innermost_phases(active: list[tuple[float, float, str]]) -> frozenset[str]:
    """§3.4.2 for one rank: drop a span that contains another with different clamped bounds.

    All active spans cover the current piece, so "contains" is cs <= other.cs and
    ce >= other.ce. Walking starts from latest to earliest keeps the smallest end seen among
    later starts; a span is outer iff some later-starting span ends no later, or a span with
    the same start ends strictly earlier. O(k log k) for k active spans of the rank.
    """
    if len(active) == 1:
        return frozenset((active[0][2],))
    ordered = sorted(active, key=lambda span: (-span[0], span[1]))
    keep: set[str] = set()
    min_end_later_start = _INF
    index = 0
    while index < len(ordered):
        group_start, group_min_end = ordered[index][0], ordered[index][1]
        while index < len(ordered) and ordered[index][0] == group_start:
            _, end, phase = ordered[index]
            if end < min_end_later_start and end == group_min_end:
                keep.add(phase)
            index += 1
        min_end_later_start = min(min_end_later_start, group_min_end)
    return frozenset(keep)


def _shares(sig: Signature, duration: float) -> dict[str, float]:
    kind = sig[0]
    if kind == _ONE:
        return {sig[1]: duration}
    if kind == _TRAIN:
        # duration x num / den (not x a rounded f) keeps hand-checkable numbers exact.
        repeated = duration * sig[1] / sig[2]
        return {PRODUCTIVE: duration - repeated, REPEATED_TRAINING: repeated}
    each = duration / len(sig[1])
    return {phase: each for phase in sig[1]}


def _time_to_start(windows: list[AttemptWindow], train: list[Event]) -> float | None:
    """§3.8: first attempt's start to the first train span's start (None before any)."""
    return _time_to_start_at(windows, min(map(_START, train)) if train else None)


def _time_to_start_at(windows: list[AttemptWindow], first_train: float | None) -> float | None:
    """:func:`_time_to_start` given the first train span's start."""
    if first_train is None:
        return None
    return max(0.0, first_train - windows[0].start)


def _times_to_recover(windows: list[AttemptWindow], ordered: list[_Attempt],
                      sigs: Mapping[str, Signature]) -> list[tuple[int, float, float]]:
    """§3.8: per failed/preempted/lost attempt, its last event -> the next productive second.

    Returns ``(attempt, start, end)`` per value, in attempt order.

    The productive second is taken from train spans (repeated steps first: start + f x
    length), restricted to the part of the span inside its own attempt window. Only
    attempts after the first failure are searched: nothing earlier can be a recovery.
    """
    failed = [i for i, window in enumerate(windows) if window.status in FAILED_STATUSES]
    if not failed:
        return []
    firsts: list[float | None] = [None] * len(windows)
    for index in range(failed[0], len(windows)):
        firsts[index] = _first_productive(windows[index], ordered[index].spans, sigs)
    return recoveries_from(windows, firsts)


def _times_to_recover_on(windows: list[AttemptWindow], train: TrainColumns,
                         redone: _Redone) -> list[tuple[int, float, float]]:
    """:func:`_times_to_recover` from the train spans' columns and splits."""
    failed = [i for i, window in enumerate(windows) if window.status in FAILED_STATUSES]
    if not failed:
        return []
    codes, splits = redone.codes.tolist(), redone.splits
    firsts: list[float | None] = [None] * len(windows)
    for index in range(failed[0], len(windows)):
        order, starts, ends = train.by_start(index)
        walk = zip(starts, ends, order, strict=True)
        firsts[index] = _first_productive_of(windows[index], walk,
                                             lambda at: splits[codes[at]])
    return recoveries_from(windows, firsts)


def recoveries_from(windows: Sequence[AttemptWindow],
                    firsts: Sequence[float | None]) -> list[tuple[int, float, float]]:
    """§3.8 from each window's first productive second (``None``: none): per failed,
    preempted or lost attempt followed by one, ``(attempt, its last event, that second)``.
    Shared with the chunked attribution, which finds each attempt's first productive
    second chunk by chunk."""
    recover: list[tuple[int, float, float]] = []
    upcoming: float | None = None
    for window, here in zip(reversed(windows), reversed(firsts), strict=True):
        if window.status in FAILED_STATUSES and upcoming is not None:
            recover.append((window.attempt, window.last_event, upcoming))
        if here is not None and (upcoming is None or here < upcoming):
            upcoming = here
    recover.reverse()
    return recover


def _first_productive(window: AttemptWindow, spans: Iterable[Event],
                      sigs: Mapping[str, Signature]) -> float | None:
    """The attempt's first productive second among ``spans``; spans are walked by start so
    the walk stops as soon as no later span can turn productive earlier."""
    train = sorted((span for span in spans if span["phase"] == TRAIN_PHASE), key=_START)
    return _first_productive_of(window, ((span["start"], span["end"], span["id"])
                                         for span in train), sigs.__getitem__)


def _first_productive_of(window: AttemptWindow, train: Iterable[tuple[float, float, Any]],
                         sig_of: Callable[[Any], Signature]) -> float | None:
    """:func:`_first_productive` over ``(start, end, key)`` of the train spans by start;
    ``sig_of(key)`` is a span's split, asked only of the spans walked."""
    first: float | None = None
    for start, end, key in train:
        if first is not None and start >= first:
            break
        sig = sig_of(key)
        if sig == _REPEATED_SIG or end <= start:
            continue
        moment = start
        if sig[0] == _TRAIN:
            moment += (end - start) * int(sig[1]) / int(sig[2])
        moment = max(moment, window.start)
        if moment < min(end, window.end) and (first is None or moment < first):
            first = moment
    return first


def _recovery(attempt: int, start: float, end: float, segments: list[Segment]) -> Recovery:
    """The categories inside one recovery interval, read off the job's segments."""
    seconds: dict[str, float] = {}
    gpu_seconds: dict[str, float] = {}
    index = bisect_right(segments, start, key=_SEGMENT_END)
    while index < len(segments) and segments[index].start < end:
        seg = segments[index]
        for category, part in _overlap_shares(seg, start, end).items():
            seconds[category] = seconds.get(category, 0.0) + part
            gpu_seconds[category] = gpu_seconds.get(category, 0.0) + part * seg.gpus
        index += 1
    return Recovery(attempt, start, end, seconds, gpu_seconds)


_SEGMENT_END: Final = attrgetter("end")


def _overlap_shares(seg: Segment, start: float, end: float) -> dict[str, float]:
    """Seconds per category of ``seg`` inside ``[start, end)``.

    Shares are uniform over a segment, except training: inside a train span the repeated
    steps come first (§3.8), and a recovery ends at the first second any train span turns
    productive, so every training second inside the interval lies before its span's turn:
    it is ``repeated_training``, whatever share of the span's whole length is. Reading it
    per span rather than per segment also makes the split independent of where segments
    are cut (merged neighbours, chunk boundaries).
    """
    lo, hi = max(seg.start, start), min(seg.end, end)
    if hi <= lo:
        return {}
    if PRODUCTIVE in seg.shares:
        return {REPEATED_TRAINING: hi - lo}
    duration = seg.end - seg.start
    return {category: share * (hi - lo) / duration for category, share in seg.shares.items()}


#: Every anomaly key ``JobAttribution.anomalies`` may hold, with what it counts. Each is a
#: valid timeline the spec still attributes (clamping, cutting, first/last mark wins), but
#: that a correct trainer and supervisor would not produce: worth a look by the job owner.
ANOMALY_KINDS: Final[dict[str, str]] = {
    "span_outside_attempt":
        "spans (partly) outside their attempt window; the outside part is not attributed",
    "heartbeat_outside_attempt": "heartbeat marks outside their attempt window",
    "events_after_later_attempt_start":
        "events of an attempt (span start or mark time) after a later attempt had started",
    "attempt_starts_before_previous":
        "attempts starting before the previous attempt started (window moved to its end)",
    "attempt_end_before_start": "attempts whose attempt_end mark precedes their attempt_start",
    "repeated_attempt_start": "attempt_start marks beyond the first of an attempt",
    "repeated_attempt_end": "attempt_end marks beyond the first of an attempt",
    "conflicting_attempt_end_status": "attempts whose attempt_end marks disagree on the status",
    "train_steps_backwards":
        "train spans starting at a step below every train span of the earlier attempts: a "
        "restart cannot resume before the point where the job had started training",
    BACKWARDS:
        "ranks whose latest heartbeat in an attempt reports a lower step than an earlier "
        "heartbeat of theirs: kept, but it implies no training (ETT_SPEC §3 rule 3)",
}


def _anomalies(ordered: list[_Attempt], windows: list[AttemptWindow],
               train_steps: Sequence[list[int]] | None = None,
               outside: Sequence[int] | None = None) -> dict[str, int]:
    """Count the inconsistent-but-valid things of one job (keys: ``ANOMALY_KINDS``).

    Never raises: the attribution of such timelines is defined by §3; this only makes them
    visible. Attempts are in attempt-number order, as are their windows. ``train_steps``
    (each attempt's train ``step_start`` values) and ``outside`` (each attempt's spans
    reaching outside its window) are read from the spans when not given.
    """
    counts = dict.fromkeys(ANOMALY_KINDS, 0)
    later_start = _INF  # earliest raw start of any later attempt
    lowest_step: int | None = None  # lowest train step_start of the earlier attempts
    for index, (attempt, window) in enumerate(zip(ordered, windows, strict=True)):
        _count_window_anomalies(counts, attempt, window,
                                None if outside is None else outside[index])
        train_starts = (train_steps[index] if train_steps is not None else
                        [span["step_start"] for span in attempt.spans
                         if span["phase"] == TRAIN_PHASE])
        if lowest_step is not None:
            counts["train_steps_backwards"] += sum(1 for step in train_starts
                                                   if step < lowest_step)
        if train_starts:
            lowest = min(train_starts)
            lowest_step = lowest if lowest_step is None else min(lowest_step, lowest)
    previous_start: float | None = None
    for attempt in ordered:
        if previous_start is not None and attempt.start < previous_start:
            counts["attempt_starts_before_previous"] += 1
        previous_start = attempt.start
    for attempt in reversed(ordered):
        if attempt.last > later_start:  # else no event of it can be after (the usual case)
            counts["events_after_later_attempt_start"] += (
                sum(1 for span in attempt.spans if span["start"] > later_start)
                + sum(1 for mark in attempt.marks if mark["ts"] > later_start))
        later_start = min(later_start, attempt.start)
    return {key: value for key, value in counts.items() if value}


def _count_window_anomalies(counts: dict[str, int], attempt: _Attempt,
                            window: AttemptWindow, outside: int | None = None) -> None:
    """The anomalies visible within one attempt: its marks and its spans vs its window
    (``outside``: how many spans reach outside it, when already counted)."""
    ws, we = window.start, window.end
    if attempt.first < ws or attempt.last > we:  # else every span is inside (the usual case)
        counts["span_outside_attempt"] += (
            outside if outside is not None else
            sum(1 for span in attempt.spans if span["start"] < ws or span["end"] > we))
    starts = ends = 0
    statuses: set[str] = set()
    for mark in attempt.marks:
        kind = mark["mark"]
        if kind == "attempt_start":
            starts += 1
        elif kind == "attempt_end":
            ends += 1
            statuses.add(mark["attrs"]["status"])
        elif not ws <= mark["ts"] <= we:
            counts["heartbeat_outside_attempt"] += 1
    counts["repeated_attempt_start"] += max(0, starts - 1)
    counts["repeated_attempt_end"] += max(0, ends - 1)
    counts["conflicting_attempt_end_status"] += len(statuses) > 1
    if attempt.start_mark and attempt.end_mark and attempt.end_mark[0] < attempt.start_mark[0]:
        counts["attempt_end_before_start"] += 1
