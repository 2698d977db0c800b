"""Where an event lives in a job's timeline, and what a chunk's events say about the job.

The chunked attribution computes the same numbers as :func:`engine.attribute_job` (ETT_SPEC
§3 unchanged) from pieces that can be stored and recomputed one at a time, so a refresh
recomputes what new events change rather than the whole job. Its modules, in the order a
refresh uses them: this one (fine chunks, each chunk's summary, the job's skeleton),
:mod:`.chunk_sweep` (one chunk's attribution and what is kept of it), :mod:`.chunk_refresh`
(which chunks a refresh recomputes) and :mod:`.chunk_sums` (the job's numbers summed from
its chunks). Pure Python, no Django: the rollup refresh keeps the pieces in Postgres
(``ettweb.rollups.chunk_store``), the property tests in a dict.

**Fine chunks.** A job's timeline is cut into *fine chunks* at multiples of ``chunk_s`` (a
quarter hour by default; it divides a UTC day). An event's *home* fine chunk holds its start
(a span) or its time (a mark): the key the events table is partitioned on, so a fine chunk's
events are one index range scan. A stored *chunk* is a run of fine chunks of one UTC day
(:func:`.chunk_refresh.plan` places them), named by its first fine chunk; it sweeps from
there until the next chunk starts, so every second after the job's first event lies in
exactly one chunk.

**Summaries.** Per attempt, a chunk's home events give first and last times, marks and
counts. Mins, maxes and counts fold over chunks in any order, so the attempt windows (§3.1)
and the whole-job anomalies (the job's *skeleton*, which every chunk's sweep reads) come from
a job's summaries alone, never from its events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

from collector.schema import TRAIN_PHASE

from .completeness import PhaseFacts, phase_facts
from .engine import ANOMALY_KINDS, DAY_S, AttemptWindow, Event, attempt_windows

#: The default fine chunk: a quarter hour (``ETT_CHUNK_S``'s default).
CHUNK_S: Final = 900.0
_INF: Final = float("inf")


def check_chunk_s(chunk_s: float) -> float:
    """A chunk length must divide a UTC day into whole chunks (a chunk lies in one day)."""
    if not chunk_s > 0 or DAY_S % chunk_s != 0:
        raise ValueError(f"chunk length must divide a day (86400 s) evenly, not {chunk_s}")
    return chunk_s


def home_time(event: Event) -> float:
    """Where an event lives: a span's start, a mark's time (the partition key)."""
    return float(event["start"] if event["kind"] == "span" else event["ts"])


def chunk_of(seconds: float, chunk_s: float = CHUNK_S) -> int:
    """The fine chunk holding an epoch second."""
    return math.floor(seconds / chunk_s)


def home_of(by_fine: Mapping[int, list[Event]], k: int, following: int | None) -> list[Event]:
    """The events of fine chunks [k, following) from events grouped by fine chunk."""
    return [e for f in sorted(by_fine) if f >= k and (following is None or f < following)
            for e in by_fine[f]]


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """What one chunk's home events say about one attempt; folds with other chunks'.

    ``lo``/``hi``: the earliest span start or heartbeat and the latest span end or
    heartbeat (what window clamping and the outside-window anomalies look at);
    ``raw_last``: the latest span start or mark time (what "after a later attempt's start"
    looks at). ``None`` where the chunk has no such event. ``facts``: what the completeness
    check reads (``None`` in a summary stored before the check existed).
    """

    attempt: int
    events: int
    first: float
    last: float
    last_activity: float | None
    start_mark: tuple[float, str, dict[str, Any]] | None
    end_mark: tuple[float, str, str] | None
    start_marks: int
    end_marks: int
    statuses: tuple[str, ...]
    train_start: float | None
    train_step: int | None
    lo: float | None
    hi: float | None
    raw_last: float
    facts: PhaseFacts | None = None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.events, "first": self.first, "last": self.last,
                "act": self.last_activity,
                "sm": list(self.start_mark) if self.start_mark else None,
                "em": list(self.end_mark) if self.end_mark else None,
                "sms": self.start_marks, "ems": self.end_marks, "st": list(self.statuses),
                "ts": self.train_start, "tstep": self.train_step, "lo": self.lo,
                "hi": self.hi, "raw": self.raw_last,
                "ph": None if self.facts is None else self.facts.to_json()}

    @classmethod
    def from_json(cls, attempt: int, raw: Mapping[str, Any]) -> AttemptSummary:
        sm, em = raw["sm"], raw["em"]
        return cls(attempt=attempt, events=raw["n"], first=raw["first"], last=raw["last"],
                   last_activity=raw["act"],
                   start_mark=(float(sm[0]), str(sm[1]), dict(sm[2])) if sm else None,
                   end_mark=(float(em[0]), str(em[1]), str(em[2])) if em else None,
                   start_marks=raw["sms"], end_marks=raw["ems"], statuses=tuple(raw["st"]),
                   train_start=raw["ts"], train_step=raw["tstep"], lo=raw["lo"],
                   hi=raw["hi"], raw_last=raw["raw"],
                   facts=PhaseFacts.from_json(raw["ph"]) if raw.get("ph") else None)


def summarize(events: Iterable[Event]) -> dict[int, AttemptSummary]:
    """One chunk's home events, summed up per attempt."""
    grouped: dict[int, list[Event]] = {}
    for event in events:
        grouped.setdefault(event["attempt"], []).append(event)
    return {attempt: _summary(attempt, group) for attempt, group in sorted(grouped.items())}


def _summary(attempt: int, events: list[Event]) -> AttemptSummary:
    spans = [e for e in events if e["kind"] == "span"]
    marks = [e for e in events if e["kind"] != "span"]
    beats = [m["ts"] for m in marks if m["mark"] not in ("attempt_start", "attempt_end")]
    train = [s for s in spans if s["phase"] == TRAIN_PHASE]
    starts = [s["start"] for s in spans]
    ends = [s["end"] for s in spans]
    times = [m["ts"] for m in marks]
    activity = ends + [m["ts"] for m in marks if m["mark"] != "attempt_end"]
    start_mark = min(((m["ts"], m["id"], m["attrs"]) for m in marks
                      if m["mark"] == "attempt_start"), key=lambda t: (t[0], t[1]), default=None)
    end_mark = max(((m["ts"], m["id"], m["attrs"]["status"]) for m in marks
                    if m["mark"] == "attempt_end"), default=None)
    return AttemptSummary(
        attempt=attempt, events=len(events), first=min(starts + times),
        last=max(ends + times), last_activity=max(activity, default=None),
        start_mark=start_mark, end_mark=end_mark,
        start_marks=sum(1 for m in marks if m["mark"] == "attempt_start"),
        end_marks=sum(1 for m in marks if m["mark"] == "attempt_end"),
        statuses=tuple(sorted({m["attrs"]["status"] for m in marks
                               if m["mark"] == "attempt_end"})),
        train_start=min((s["start"] for s in train), default=None),
        train_step=min((s["step_start"] for s in train), default=None),
        lo=min(starts + beats, default=None), hi=max(ends + beats, default=None),
        raw_last=max(starts + times), facts=phase_facts(spans))


class _Folded:
    """One attempt's summaries folded over its chunks (what ``attempt_windows`` reads)."""

    __slots__ = ("attempt", "end_mark", "end_marks", "events", "facts", "facts_known",
                 "first", "last", "last_activity", "start_mark", "start_marks", "statuses",
                 "train_start", "train_step")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.events = self.start_marks = self.end_marks = 0
        self.first, self.last, self.last_activity = _INF, -_INF, -_INF
        self.start_mark: tuple[float, str, dict[str, Any]] | None = None
        self.end_mark: tuple[float, str, str] | None = None
        self.statuses: set[str] = set()
        self.train_start: float | None = None
        self.train_step: int | None = None
        self.facts: PhaseFacts | None = None
        self.facts_known = True  # False once a summary from before the check is folded in

    @property
    def start(self) -> float:
        return self.start_mark[0] if self.start_mark else self.first

    def add(self, s: AttemptSummary) -> None:
        self.events += s.events
        self.first, self.last = min(self.first, s.first), max(self.last, s.last)
        if s.last_activity is not None:
            self.last_activity = max(self.last_activity, s.last_activity)
        if s.start_mark is not None and (self.start_mark is None
                                         or s.start_mark[:2] < self.start_mark[:2]):
            self.start_mark = s.start_mark
        if s.end_mark is not None and (self.end_mark is None or s.end_mark > self.end_mark):
            self.end_mark = s.end_mark
        self.start_marks += s.start_marks
        self.end_marks += s.end_marks
        self.statuses.update(s.statuses)
        self.train_start = min_known(self.train_start, s.train_start)
        self.train_step = min_known(self.train_step, s.train_step)
        if s.facts is None:
            self.facts_known = False
        else:
            self.facts = s.facts if self.facts is None else self.facts.merged(s.facts)


def min_known(a: Any, b: Any) -> Any:
    """The smaller of two values where ``None`` means not known (so the other wins)."""
    return b if a is None else a if b is None else min(a, b)


def max_known(a: Any, b: Any) -> Any:
    """The larger of two values where ``None`` means not known (so the other wins)."""
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class Skeleton:
    """The job-wide facts every chunk reads: windows (§3.1) and the anomaly thresholds."""

    windows: list[AttemptWindow]
    by_attempt: dict[int, AttemptWindow]
    #: Per attempt: the earliest start of any later attempt (``inf``: none).
    later_start: dict[int, float]
    #: Per attempt: the lowest train ``step_start`` of the earlier attempts (None: none).
    lowest_step: dict[int, int | None]
    anomalies: dict[str, int]
    train_start: float | None
    events: int
    #: Per attempt: what the completeness check reads (``None``: not known for every chunk).
    facts: dict[int, PhaseFacts | None] = field(default_factory=dict)


def fold(summaries: Iterable[Mapping[int, AttemptSummary]]) -> Skeleton | None:
    """The skeleton of a job from its chunks' summaries (``None``: no events)."""
    folded: dict[int, _Folded] = {}
    for chunk in summaries:
        for number, summary in chunk.items():
            if number not in folded:
                folded[number] = _Folded(number)
            folded[number].add(summary)
    if not folded:
        return None
    ordered = [folded[a] for a in sorted(folded)]
    windows = attempt_windows(ordered)
    later: dict[int, float] = {}
    earliest = _INF
    for attempt in reversed(ordered):
        later[attempt.attempt] = earliest
        earliest = min(earliest, attempt.start)
    lowest: dict[int, int | None] = {}
    low: int | None = None
    for attempt in ordered:
        lowest[attempt.attempt] = low
        low = min_known(low, attempt.train_step)
    counts = dict.fromkeys(ANOMALY_KINDS, 0)
    for previous, attempt in pairwise(ordered):
        counts["attempt_starts_before_previous"] += attempt.start < previous.start
    for attempt in ordered:
        counts["repeated_attempt_start"] += max(0, attempt.start_marks - 1)
        counts["repeated_attempt_end"] += max(0, attempt.end_marks - 1)
        counts["conflicting_attempt_end_status"] += len(attempt.statuses) > 1
        if (attempt.start_mark and attempt.end_mark
                and attempt.end_mark[0] < attempt.start_mark[0]):
            counts["attempt_end_before_start"] += 1
    train_start: float | None = None
    for attempt in ordered:
        train_start = min_known(train_start, attempt.train_start)
    return Skeleton(windows=windows, by_attempt={w.attempt: w for w in windows},
                    later_start=later, lowest_step=lowest,
                    anomalies={k: v for k, v in counts.items() if v},
                    train_start=train_start, events=sum(a.events for a in ordered),
                    facts={a.attempt: a.facts if a.facts_known else None for a in ordered})
