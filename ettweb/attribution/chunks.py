"""Attribution in time chunks: a refresh recomputes what new events change, not the job.

ETT_SPEC §3 is unchanged; this module computes the same numbers as :func:`engine.attribute_job`
from pieces that can be stored and recomputed one at a time (issue 15). Pure Python, no
Django: the rollup refresh keeps the pieces in Postgres, the property tests in a dict.

**Chunks.** A job's timeline is cut into *fine chunks* at multiples of ``chunk_s`` (15
minutes by default; it divides a UTC day). An event's *home* fine chunk holds its start (a
span) or its time (a mark): the key the events table is partitioned on, so a fine chunk's
events are one index range scan. A stored *chunk* is a run of fine chunks of one UTC day
with up to ``GROUP_EVENTS`` events (a short small job is one chunk, a thousand-rank job one
per fine chunk), named by its first fine chunk; it sweeps from there until the next chunk
starts, so every second after the job's first event lies in exactly one chunk.

**What a chunk stores.**

* a *summary* of its home events per attempt: first and last times, marks, counts. Mins,
  maxes and counts fold over chunks in any order, so the attempt windows (§3.1) and the
  whole-job anomalies come from a job's summaries alone, never from its events;
* the *carry*: spans still open at its end (with each train span's split), and ``h_out``,
  the largest ``step_end`` of the train spans that ended by then (§3.3.1's high-water
  mark). The next chunk starts from them: every train span's split is known from the spans
  ending in its own chunk plus the carried mark;
* its *parts*: per attempt, seconds per UTC day and split ("signature") of the swept window
  inside the chunk, the first productive second, repeated steps and the anomalies its events
  show; and the swept segments, the category timeline and the rank lanes of the chunk.

**When a chunk is recomputed.** Each stored chunk keeps a *key*: everything outside its own
events that its parts depend on — where the next chunk starts, the carried mark and spans
it started from, and, per
attempt, the window bounds clipped to the chunk, the failure tail if it falls inside, and a
window bound, a later attempt's start or an earlier attempt's lowest step only when one of
its events lies beyond it (the clamping and the anomalies look at them only then). A refresh
recomputes a chunk that got new events or whose key changed, in time order, so a changed
carry reaches the next chunk in the same pass. A running attempt's growing end changes only
its last chunk's key; a late event days back recomputes its chunk and any chunk its carry or
high-water mark reaches, and no more.
"""

from __future__ import annotations

import hashlib
import json
import math
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from itertools import pairwise
from operator import itemgetter
from typing import Any, Final

from collector.schema import FAILED_STATUSES, TRAIN_PHASE

from .components import PRODUCTIVE
from .engine import (
    _ONE,
    _PRODUCTIVE_SIG,
    _SPLIT,
    _TRAIN,
    ANOMALY_KINDS,
    DAY_S,
    RESTART_GAP,
    AttemptWindow,
    Event,
    JobAttribution,
    Recovery,
    Segment,
    Signature,
    _first_productive,
    _overlap_shares,
    _shares,
    _Totals,
    _train_signatures,
    attempt_windows,
    gc_paused,
    per_day,
    recoveries_from,
    split_repeated,
    sweep_chunk,
)
from .lanes import (
    MAX_PIECES,
    Lane,
    Piece,
    Timeline,
    _append_piece,
    _bounded,
    category_timeline,
    rank_lanes,
)

#: The default fine chunk: a quarter hour (``ETT_CHUNK_S``'s default).
CHUNK_S: Final = 900.0
#: Events a refresh keeps in memory between reading a chunk for its summary and sweeping it
#: (above it, the chunk is read again): bounds a refresh's memory whatever the backlog.
CACHED_EVENTS: Final = 150_000
_INF: Final = float("inf")
_RESTART_SIG: Final[Signature] = (_ONE, RESTART_GAP)
#: The anomalies a chunk's own events show; the others come from the summaries' fold.
CHUNK_ANOMALIES: Final = ("span_outside_attempt", "heartbeat_outside_attempt",
                          "events_after_later_attempt_start", "train_steps_backwards")
_CARRIED_FIELDS: Final = ("id", "attempt", "rank", "phase", "start", "end", "blocking")
_END: Final = itemgetter("end")
_START: Final = itemgetter("start")


def check_chunk_s(chunk_s: float) -> float:
    """A chunk length must divide a UTC day into whole chunks (a chunk lies in one day)."""
    if not chunk_s > 0 or DAY_S % chunk_s != 0:
        raise ValueError(f"chunk length must divide a day (86400 s) evenly, not {chunk_s}")
    return chunk_s


def home_time(event: Event) -> float:
    """Where an event lives: a span's start, a mark's time (the partition key)."""
    return float(event["start"] if event["kind"] == "span" else event["ts"])


def chunk_of(seconds: float, chunk_s: float = CHUNK_S) -> int:
    return math.floor(seconds / chunk_s)


# =========================================================================== signatures as JSON

def sig_to_json(sig: Signature) -> list[Any]:
    return [sig[0], list(sig[1])] if sig[0] == _SPLIT else list(sig)


def sig_from_json(raw: Sequence[Any]) -> Signature:
    kind = int(raw[0])
    if kind == _SPLIT:
        return (_SPLIT, tuple(raw[1]))
    if kind == _TRAIN:
        return (_TRAIN, int(raw[1]), int(raw[2]))
    return (_ONE, str(raw[1]))


# =========================================================================== summaries

@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """What one chunk's home events say about one attempt; folds with other chunks'.

    ``lo``/``hi``: the earliest span start or heartbeat and the latest span end or
    heartbeat (what window clamping and the outside-window anomalies look at);
    ``raw_last``: the latest span start or mark time (what "after a later attempt's start"
    looks at). ``None`` where the chunk has no such event.
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

    def to_json(self) -> dict[str, Any]:
        return {"n": self.events, "first": self.first, "last": self.last,
                "act": self.last_activity,
                "sm": list(self.start_mark) if self.start_mark else None,
                "em": list(self.end_mark) if self.end_mark else None,
                "sms": self.start_marks, "ems": self.end_marks, "st": list(self.statuses),
                "ts": self.train_start, "tstep": self.train_step, "lo": self.lo,
                "hi": self.hi, "raw": self.raw_last}

    @classmethod
    def from_json(cls, attempt: int, raw: Mapping[str, Any]) -> AttemptSummary:
        sm, em = raw["sm"], raw["em"]
        return cls(attempt=attempt, events=raw["n"], first=raw["first"], last=raw["last"],
                   last_activity=raw["act"],
                   start_mark=(float(sm[0]), str(sm[1]), dict(sm[2])) if sm else None,
                   end_mark=(float(em[0]), str(em[1]), str(em[2])) if em else None,
                   start_marks=raw["sms"], end_marks=raw["ems"], statuses=tuple(raw["st"]),
                   train_start=raw["ts"], train_step=raw["tstep"], lo=raw["lo"],
                   hi=raw["hi"], raw_last=raw["raw"])


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
        raw_last=max(starts + times))


class _Folded:
    """One attempt's summaries folded over its chunks (what ``attempt_windows`` reads)."""

    __slots__ = ("attempt", "end_mark", "end_marks", "events", "first", "last",
                 "last_activity", "start_mark", "start_marks", "statuses", "train_start",
                 "train_step")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.events = self.start_marks = self.end_marks = 0
        self.first, self.last, self.last_activity = _INF, -_INF, -_INF
        self.start_mark: tuple[float, str, dict[str, Any]] | None = None
        self.end_mark: tuple[float, str, str] | None = None
        self.statuses: set[str] = set()
        self.train_start: float | None = None
        self.train_step: int | None = None

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
        self.train_start = _min(self.train_start, s.train_start)
        self.train_step = _min(self.train_step, s.train_step)


def _min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _max(a: Any, b: Any) -> Any:
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
        low = _min(low, attempt.train_step)
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
        train_start = _min(train_start, attempt.train_start)
    return Skeleton(windows=windows, by_attempt={w.attempt: w for w in windows},
                    later_start=later, lowest_step=lowest,
                    anomalies={k: v for k, v in counts.items() if v},
                    train_start=train_start, events=sum(a.events for a in ordered))


# =========================================================================== one chunk

@dataclass(slots=True)
class AttemptPart:
    """One attempt's share of one chunk; ``durations``: seconds per (UTC day number, split)."""

    durations: dict[tuple[int, Signature], float]
    first_productive: float | None
    repeated_steps: int
    anomalies: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"d": [[day, sig_to_json(sig), s] for (day, sig), s in self.durations.items()],
                "f": self.first_productive, "r": self.repeated_steps, "a": self.anomalies}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AttemptPart:
        return cls({(int(day), sig_from_json(sig)): s for day, sig, s in raw["d"]}, raw["f"],
                   raw["r"], dict(raw["a"]))


@dataclass(slots=True)
class ChunkState:
    """What is kept of one occupied chunk. The small fields are read at every refresh of
    the job; ``carry``, ``segments``, ``timelines`` and ``lanes`` only when needed
    (``None``: not loaded)."""

    chunk: int
    summary: dict[int, AttemptSummary]
    key: str
    h_out: int
    carry_digest: str
    carry_ext: dict[int, tuple[float, float]]
    parts: dict[int, AttemptPart]
    #: Its home events, and the last fine chunk holding one (what grouping reads).
    events: int = 0
    last_fine: int = -1
    #: Its events were dropped by retention: summed as stored, never recomputed.
    final: bool = False
    carry: list[Event] | None = None
    segments: list[Segment] | None = None
    timelines: list[Timeline] | None = None
    lanes: list[Lane] | None = None

    def state_json(self) -> dict[str, Any]:
        """The small fields other than the summary, as JSON."""
        return {"key": self.key, "h": self.h_out, "cd": self.carry_digest,
                "n": self.events, "lf": self.last_fine,
                "ce": {str(a): list(e) for a, e in self.carry_ext.items()},
                "p": {str(a): part.to_json() for a, part in self.parts.items()}}

    def summary_json(self) -> dict[str, Any]:
        return {str(a): s.to_json() for a, s in self.summary.items()}

    @classmethod
    def from_json(cls, chunk: int, summary: Mapping[str, Any],
                  state: Mapping[str, Any], *, final: bool = False) -> ChunkState:
        return cls(chunk=chunk, final=final,
                   summary={int(a): AttemptSummary.from_json(int(a), s)
                            for a, s in summary.items()},
                   key=state["key"], h_out=state["h"], carry_digest=state["cd"],
                   events=state["n"], last_fine=state["lf"],
                   carry_ext={int(a): (e[0], e[1]) for a, e in state["ce"].items()},
                   parts={int(a): AttemptPart.from_json(p) for a, p in state["p"].items()})


def segments_to_json(segments: Iterable[Segment]) -> list[list[Any]]:
    return [[s.start, s.end, s.attempt, s.shares] for s in segments]


def segments_from_json(raw: Iterable[Sequence[Any]]) -> list[Segment]:
    return [Segment(float(a), float(b), int(att), 1, dict(shares))
            for a, b, att, shares in raw]


_NO_CARRY: Final = ""


def _carry_digest(carry: list[Event]) -> str:
    if not carry:
        return _NO_CARRY
    return hashlib.blake2b(json.dumps(carry, sort_keys=True).encode(),
                           digest_size=16).hexdigest()


def _extent(chunk: int, following: int | None, chunk_s: float) -> tuple[float, float]:
    """The time a chunk sweeps: from its first fine chunk to the next chunk's (or on)."""
    return chunk * chunk_s, _INF if following is None else following * chunk_s


def chunk_key(chunk: int, following: int | None, chunk_s: float,
              summary: Mapping[int, AttemptSummary],
              carry_ext: Mapping[int, tuple[float, float]], carry_digest: str, h_in: int,
              skeleton: Skeleton) -> str:
    """Everything outside the chunk's own events that its parts depend on (module doc);
    ``following``: the next chunk's first fine chunk (``None``: the job's last chunk)."""
    a, b = _extent(chunk, following, chunk_s)
    entries: list[list[Any]] = []
    for attempt in _relevant(a, b, summary, skeleton):
        w = skeleton.by_attempt[attempt]
        a2, b2 = max(w.start, a), min(w.end, b)
        tail: float | None = None
        if a2 < b2 and w.status in FAILED_STATUSES:
            tail = min(max(w.last_event, a2), b2)
            tail = None if tail >= b2 else tail
        s = summary.get(attempt)
        extent = carry_ext.get(attempt)
        lo = _min(s.lo if s else None, extent[0] if extent else None)
        hi = _max(s.hi if s else None, extent[1] if extent else None)
        later = skeleton.later_start[attempt]
        low = skeleton.lowest_step[attempt]
        entries.append([
            attempt, a2 if a2 < b2 else None, b2 if a2 < b2 else None, tail,
            w.start if lo is not None and lo < w.start else None,
            w.end if hi is not None and hi > w.end else None,
            later if s is not None and s.raw_last > later else None,
            low if (s is not None and s.train_step is not None and low is not None
                    and s.train_step < low) else None])
    return json.dumps([following, h_in, carry_digest, entries])


def _relevant(a: float, b: float, summary: Mapping[int, AttemptSummary],
              skeleton: Skeleton) -> list[int]:
    """Attempts with home events in the chunk or a window overlapping [a, b), in order."""
    attempts = set(summary)
    for w in skeleton.windows:
        if max(w.start, a) < min(w.end, b):
            attempts.add(w.attempt)
    return sorted(attempts)


def compute_chunk(chunk: int, following: int | None, chunk_s: float, home: Sequence[Event],
                  carry_in: Sequence[Event], h_in: int, skeleton: Skeleton, *,
                  summary: Mapping[int, AttemptSummary] | None = None,
                  key: str | None = None, with_lanes: bool = True) -> ChunkState:
    """Attribute one chunk from its home events, the carry of the chunk before it and the
    job's skeleton: exactly what the whole job's sweep gives over the chunk's extent (from
    its first fine chunk to the next chunk's, ``following``; ``None``: to the job's end).
    ``summary`` and ``key``: the chunk's, when the caller has them already (a refresh does:
    the key digests the carry, a thousand spans for a thousand-rank job)."""
    a, b = _extent(chunk, following, chunk_s)
    summary = dict(summary) if summary is not None else summarize(home)
    spans = [e for e in home if e["kind"] == "span"]
    sigs: dict[str, Signature] = {c["id"]: sig_from_json(c["sig"]) for c in carry_in
                                  if c["phase"] == TRAIN_PHASE}
    train = [c for c in carry_in if c["phase"] == TRAIN_PHASE]
    home_train = [s for s in spans if s["phase"] == TRAIN_PHASE]
    repeated = _sign(home_train, train + home_train, h_in, sigs)
    local = train + home_train
    h_out = max([h_in, *(t["step_end"] for t in local if t["end"] <= b)])
    carry_out = sorted((_carried(span, sigs) for span in (*carry_in, *spans) if span["end"] > b),
                       key=itemgetter("id"))
    spans_of: dict[int, list[Event]] = {}
    for span in (*carry_in, *spans):
        spans_of.setdefault(span["attempt"], []).append(span)
    home_of: dict[int, list[Event]] = {}
    for event in home:
        home_of.setdefault(event["attempt"], []).append(event)
    segments: list[Segment] = []
    parts: dict[int, AttemptPart] = {}
    lanes: list[Lane] = []
    for attempt in _relevant(a, b, summary, skeleton):
        w = replace(skeleton.by_attempt[attempt], gpus=1)
        mine = spans_of.get(attempt, [])
        durations: dict[tuple[int, Signature], float] = {}
        a2, b2 = max(w.start, a), min(w.end, b)
        lo = a2
        while lo < b2:  # day by day: a chunk's extent may run past midnight
            day = math.floor(lo / DAY_S)
            stop = min(b2, (day + 1) * DAY_S)
            for sig, seconds in sweep_chunk(w, mine, sigs, lo, stop, segments).items():
                durations[(day, sig)] = durations.get((day, sig), 0.0) + seconds
            lo = stop
        own = home_of.get(attempt, [])
        parts[attempt] = AttemptPart(
            durations=durations,
            first_productive=_first_productive(w, (e for e in own if e["kind"] == "span"),
                                               sigs),
            repeated_steps=repeated.get(attempt, 0),
            anomalies=_chunk_anomalies(own, w, skeleton))
        if with_lanes and a2 < b2:
            lanes += rank_lanes(replace(w, start=a2, end=b2), mine)
    if key is None:
        key = chunk_key(chunk, following, chunk_s, summary, _extents(carry_in),
                        _carry_digest(list(carry_in)), h_in, skeleton)
    return ChunkState(chunk=chunk, summary=summary, key=key, h_out=h_out,
                      carry_digest=_carry_digest(carry_out), carry_ext=_extents(carry_out),
                      parts=parts,
                      events=len(home),
                      last_fine=max((chunk_of(home_time(e), chunk_s) for e in home),
                                    default=-1),
                      carry=carry_out, segments=segments,
                      timelines=category_timeline(segments), lanes=lanes)


def _extents(spans: Iterable[Event]) -> dict[int, tuple[float, float]]:
    """Per attempt, the earliest start and latest end of ``spans`` (a carry's)."""
    extents: dict[int, tuple[float, float]] = {}
    for span in spans:
        lo, hi = extents.get(span["attempt"], (_INF, -_INF))
        extents[span["attempt"]] = (min(lo, span["start"]), max(hi, span["end"]))
    return extents


def _sign(home_train: list[Event], local: list[Event], h_in: int,
          sigs: dict[str, Signature]) -> dict[int, int]:
    """§3.3.1 for the chunk's own train spans, as ``engine._train_signatures`` does for a
    whole job: H from the spans ending in this chunk before each start, floored at the
    carried mark ``h_in`` (every span that ended in an earlier chunk). Fills ``sigs``;
    returns the repeated steps per attempt (§3.6).

    Spans are walked by start while a pointer walks the ends, so the running maximum is H
    (one comparison per span, not a bisection: a chunk of a thousand-rank job has tens of
    thousands). A zero-length span must not count itself, so a chunk with one takes the
    engine's bisecting walk.
    """
    if any(span["end"] <= span["start"] for span in home_train):
        return _sign_bisecting(home_train, local, h_in, sigs)
    by_end = sorted(local, key=_END)
    ends = [span["end"] for span in by_end]
    step_ends = [span["step_end"] for span in by_end]
    repeated: dict[int, int] = {}
    high, j, n = h_in, 0, len(by_end)
    for span in sorted(home_train, key=_START):
        start = span["start"]
        while j < n and ends[j] <= start:
            if step_ends[j] > high:
                high = step_ends[j]
            j += 1
        if high <= span["step_start"]:  # the common case: all new steps
            sigs[span["id"]] = _PRODUCTIVE_SIG
        else:
            split_repeated(span, high, sigs, repeated)
    return repeated


def _sign_bisecting(home_train: list[Event], local: list[Event], h_in: int,
                    sigs: dict[str, Signature]) -> dict[int, int]:
    """:func:`_sign` for a chunk holding zero-length train spans (the engine's walk)."""
    found, repeated = _train_signatures(home_train, local, h_in)
    sigs.update(found)
    return repeated


def _carried(span: Event, sigs: Mapping[str, Signature]) -> Event:
    """A span still open at the chunk's end, as the next chunk reads it (JSON-ready)."""
    carried = {name: span[name] for name in _CARRIED_FIELDS}
    if span["phase"] == TRAIN_PHASE:
        carried["step_start"], carried["step_end"] = span["step_start"], span["step_end"]
        carried["sig"] = sig_to_json(sigs[span["id"]])
    return carried


def _chunk_anomalies(own: list[Event], w: AttemptWindow, skeleton: Skeleton) -> dict[str, int]:
    """The anomalies of ``ANOMALY_KINDS`` that the chunk's own events of one attempt show."""
    ws, we = w.start, w.end
    later = skeleton.later_start[w.attempt]
    low = skeleton.lowest_step[w.attempt]
    counts = dict.fromkeys(CHUNK_ANOMALIES, 0)
    for event in own:
        if event["kind"] == "span":
            counts["span_outside_attempt"] += event["start"] < ws or event["end"] > we
            counts["events_after_later_attempt_start"] += event["start"] > later
            if event["phase"] == TRAIN_PHASE and low is not None:
                counts["train_steps_backwards"] += event["step_start"] < low
        else:
            counts["events_after_later_attempt_start"] += event["ts"] > later
            if event["mark"] not in ("attempt_start", "attempt_end"):
                counts["heartbeat_outside_attempt"] += not ws <= event["ts"] <= we
    return {k: v for k, v in counts.items() if v}


# =========================================================================== a refresh

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


@dataclass(frozen=True)
class Plan:
    """Which chunks a job has after new events landed in ``dirty`` fine chunks: their
    first fine chunks in order, and which of them must be read again."""

    chunks: list[int]
    dirty: set[int]


def plan(dirty: Collection[int], stored: Mapping[int, ChunkState],
         counts: Mapping[int, int], chunk_s: float = CHUNK_S,
         group_events: int | None = None) -> Plan:
    """Place the dirty fine chunks in chunks. A chunk is a run of fine chunks of one UTC
    day; a fine chunk inside a chunk's run belongs to it, one past the end of the last run
    joins it while it holds fewer than ``group_events`` events, and anything else starts a
    chunk of its own. ``counts``: events per dirty fine chunk (none: nothing there);
    ``group_events``: default ``GROUP_EVENTS``."""
    group_events = GROUP_EVENTS if group_events is None else group_events
    starts = sorted(stored)
    events = {k: stored[k].events for k in starts}
    placed: set[int] = set()
    pending: list[int] = []
    for f in sorted(dirty):
        holder = _holder(f, starts, stored, chunk_s)
        if holder is None:
            pending.append(f)
        else:
            placed.add(holder)
    for f in pending:
        n = counts.get(f, 0)
        if not n:
            continue
        i = bisect_right(starts, f) - 1
        if (i >= 0 and _day(starts[i], chunk_s) == _day(f, chunk_s)
                and events[starts[i]] + n <= group_events):
            events[starts[i]] += n
            placed.add(starts[i])
        else:
            starts.insert(i + 1, f)
            events[f] = n
            placed.add(f)
    return Plan(starts, placed)


def followers(starts: Sequence[int]) -> dict[int, int | None]:
    """Each chunk's next chunk's first fine chunk (``None`` for the last)."""
    return {k: (starts[i + 1] if i + 1 < len(starts) else None) for i, k in enumerate(starts)}


def _day(fine: int, chunk_s: float) -> int:
    return math.floor(fine * chunk_s / DAY_S)


def refresh(dirty: Collection[int], stored: Mapping[int, ChunkState],
            read_home: Callable[[int, int | None], list[Event]],
            read_carry: Callable[[int], list[Event]],
            count_home: Callable[[Sequence[int]], Mapping[int, int]],
            chunk_s: float = CHUNK_S, *, write: Callable[[ChunkState], None] | None = None,
            with_lanes: bool = True, cached_events: int = CACHED_EVENTS,
            group_events: int | None = None) -> Refreshed:
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
    small state of every chunk.
    """
    fresh = unplaced(dirty, stored, chunk_s)
    placed = plan(dirty, stored, count_home(fresh) if fresh else {}, chunk_s, group_events)
    return refresh_planned(placed, stored, read_home, read_carry, chunk_s, write=write,
                           with_lanes=with_lanes, cached_events=cached_events)


def unplaced(dirty: Collection[int], stored: Mapping[int, ChunkState],
             chunk_s: float = CHUNK_S) -> list[int]:
    """The dirty fine chunks no stored chunk surely holds: :func:`plan` needs their event
    counts to place them."""
    starts = sorted(stored)
    return [f for f in sorted(dirty) if _holder(f, starts, stored, chunk_s) is None]


def _holder(f: int, starts: Sequence[int], stored: Mapping[int, ChunkState],
            chunk_s: float) -> int | None:
    """The stored chunk whose run surely holds fine chunk f: the one before it, of the same
    day, unless that is the last chunk and f lies past its events (then f may join it or
    start a chunk of its own, by the events it brings)."""
    i = bisect_right(starts, f) - 1
    if i >= 0 and _day(starts[i], chunk_s) == _day(f, chunk_s) and (
            i < len(starts) - 1 or f <= stored[starts[i]].last_fine):
        return starts[i]
    return None


def refresh_planned(placed: Plan, stored: Mapping[int, ChunkState],
                    read_home: Callable[[int, int | None], list[Event]],
                    read_carry: Callable[[int], list[Event]], chunk_s: float = CHUNK_S, *,
                    write: Callable[[ChunkState], None] | None = None, with_lanes: bool = True,
                    cached_events: int = CACHED_EVENTS) -> Refreshed:
    """:func:`refresh` once the dirty fine chunks are placed (:func:`plan`)."""
    with gc_paused():
        return _refresh(placed, stored, read_home, read_carry, chunk_s, write, with_lanes,
                        cached_events)


def _refresh(placed: Plan, stored: Mapping[int, ChunkState],
             read_home: Callable[[int, int | None], list[Event]],
             read_carry: Callable[[int], list[Event]], chunk_s: float,
             write: Callable[[ChunkState], None] | None, with_lanes: bool,
             cached_events: int) -> Refreshed:
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
    previous: ChunkState | None = None
    for k in starts:
        carry_digest = previous.carry_digest if previous else _NO_CARRY
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


# =========================================================================== the job's sums

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
             chunk_s: float = CHUNK_S) -> Assembled:
    """The job's numbers from its skeleton and chunks (see :class:`Assembled`).

    ``read_segments`` gives chunks' segments, asked only for the chunks a recovery
    interval overlaps (their parts are read off segments, §3.7).
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
        while cursor < gap.end:  # split at midnight (§3.5)
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
    repeated: dict[int, int] = {}
    for k in occupied:
        for attempt, part in states[k].parts.items():
            for kind, count in part.anomalies.items():
                anomalies[kind] = anomalies.get(kind, 0) + count
            if part.repeated_steps:
                repeated[attempt] = repeated.get(attempt, 0) + part.repeated_steps
    ordered_anomalies = {k: anomalies[k] for k in ANOMALY_KINDS if anomalies.get(k)}
    attribution = JobAttribution(
        job=job, attempts=windows, wall_s=windows[-1].end - windows[0].start,
        productive_s=totals.seconds.pop(PRODUCTIVE, 0.0), wall_gpu_s=totals.wall_gpu_s,
        productive_gpu_s=totals.gpu_seconds.pop(PRODUCTIVE, 0.0),
        lost_s={k: v for k, v in totals.seconds.items() if v != 0.0},
        lost_gpu_s={k: v for k, v in totals.gpu_seconds.items() if v != 0.0},
        repeated_steps=sum(repeated.values()),
        time_to_start_s=(None if skeleton.train_start is None
                         else max(0.0, skeleton.train_start - windows[0].start)),
        time_to_recover_s=[end - start for _, start, end in recovered],
        failures=sum(1 for w in windows if w.status in FAILED_STATUSES),
        segments=[], recoveries=recoveries, anomalies=ordered_anomalies,
        repeated_steps_by_attempt=dict(sorted(repeated.items())))
    return Assembled(attribution, {key: (s, g) for key, (s, g) in days.items() if s or g})


def _first_of(attempt: int, states: Mapping[int, ChunkState],
              occupied: Sequence[int]) -> float | None:
    """The attempt's first productive second: the earliest of its chunks' (§3.7)."""
    found = [part.first_productive for k in occupied
             if (part := states[k].parts.get(attempt)) is not None
             and part.first_productive is not None]
    return min(found, default=None)


def _recovery(attempt: int, start: float, end: float, occupied: Sequence[int],
              gaps: Sequence[Segment], gpus: Mapping[int, int],
              read_segments: Callable[[Sequence[int]], Mapping[int, list[Segment]]],
              chunk_s: float) -> Recovery:
    """One recovery's categories (§3.7), read off the segments of the chunks whose extent
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
    by_fine: dict[int, list[Event]] = {}
    for event in events:
        by_fine.setdefault(chunk_of(home_time(event), chunk_s), []).append(event)
    segments: dict[int, list[Segment]] = {}

    def keep(state: ChunkState) -> None:
        segments[state.chunk] = state.segments or []

    done = refresh(set(by_fine), {}, lambda k, following: home_of(by_fine, k, following),
                   lambda k: [], lambda fines: {f: len(by_fine.get(f, [])) for f in fines},
                   chunk_s, write=keep, with_lanes=False, group_events=group_events)
    if done.skeleton is None:
        raise ValueError("attribute_in_chunks needs at least one event")
    job = str(events[0]["job"])
    return assemble(job, done.skeleton, done.states,
                    lambda ks: {k: segments.get(k, []) for k in ks}, chunk_s)


def home_of(by_fine: Mapping[int, list[Event]], k: int, following: int | None) -> list[Event]:
    """The events of fine chunks [k, following) from events grouped by fine chunk."""
    return [e for f in sorted(by_fine) if f >= k and (following is None or f < following)
            for e in by_fine[f]]
