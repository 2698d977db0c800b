"""One chunk's attribution: the whole job's sweep over the chunk's time, and what is kept.

A chunk is swept from its home events, the *carry* of the chunk before it and the job's
skeleton (:mod:`.chunk_summary`), and gives exactly what the whole job's sweep gives over
the chunk's extent. Besides its summary, a chunk keeps:

* the *carry*: spans still open at its end (with each train span's split), and ``h_out``,
  the largest ``step_end`` of the train spans that ended by then (§3.4.1's high-water
  mark). The next chunk starts from them: every train span's split is known from the spans
  ending in its own chunk plus the carried mark, never from the job's earlier events;
* its *parts*: per attempt, seconds per UTC day and split ("signature") of the swept window
  inside the chunk, the first productive second, repeated steps and the anomalies its events
  show; and the swept segments, the category timeline and the rank lanes of the chunk.

**The key.** Each chunk keeps a *key*: everything outside its own events that its parts
depend on: where the next chunk starts, the carried mark and spans it started from, and, per
attempt, the window bounds clipped to the chunk, the failure tail if it falls inside, and a
window bound, a later attempt's start or an earlier attempt's lowest step only when one of
its events lies beyond it (the clamping and the anomalies look at them only then). A chunk
with no new events and an unchanged key needs no recomputing (:mod:`.chunk_refresh`).

What is kept is JSON-ready (``to_json``/``from_json``) because Postgres keeps it as JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, Final

from collector.schema import FAILED_STATUSES, TRAIN_PHASE

from .bounds import capped
from .chunk_summary import (
    AttemptSummary,
    Skeleton,
    chunk_of,
    home_time,
    max_known,
    min_known,
    summarize,
)
from .engine import (
    _ONE,
    _PRODUCTIVE_SIG,
    _SPLIT,
    _TRAIN,
    DAY_S,
    AttemptWindow,
    Event,
    Segment,
    Signature,
    _first_productive,
    _train_signatures,
    split_repeated,
    sweep_chunk,
)
from .lanes import Lane, Timeline, category_timeline, rank_lanes

_INF: Final = float("inf")
#: The anomalies a chunk's own events show; the others come from the summaries' fold.
CHUNK_ANOMALIES: Final = ("span_outside_attempt", "heartbeat_outside_attempt",
                          "events_after_later_attempt_start", "train_steps_backwards")
_CARRIED_FIELDS: Final = ("id", "attempt", "rank", "phase", "start", "end", "blocking")
_END: Final = itemgetter("end")
_START: Final = itemgetter("start")


def sig_to_json(sig: Signature) -> list[Any]:
    """A split ("signature") as JSON: a tuple inside it becomes a list."""
    return [sig[0], list(sig[1])] if sig[0] == _SPLIT else list(sig)


def sig_from_json(raw: Sequence[Any]) -> Signature:
    """A split from its JSON (:func:`sig_to_json`), typed as the engine builds it."""
    kind = int(raw[0])
    if kind == _SPLIT:
        return (_SPLIT, tuple(raw[1]))
    if kind == _TRAIN:
        return (_TRAIN, int(raw[1]), int(raw[2]))
    return (_ONE, str(raw[1]))


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


#: The carry digest of a chunk that leaves no span open.
NO_CARRY: Final = ""


def _carry_digest(carry: list[Event]) -> str:
    if not carry:
        return NO_CARRY
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
        lo = min_known(s.lo if s else None, extent[0] if extent else None)
        hi = max_known(s.hi if s else None, extent[1] if extent else None)
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
            repeated_steps=capped(repeated.get(attempt, 0)),
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
    """§3.4.1 for the chunk's own train spans, as ``engine._train_signatures`` does for a
    whole job: H from the spans ending in this chunk before each start, floored at the
    carried mark ``h_in`` (every span that ended in an earlier chunk). Fills ``sigs``;
    returns the repeated steps per attempt (§3.7).

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
