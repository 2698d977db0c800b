"""ETT_SPEC §3 rule 3: progress only a heartbeat saw.

A span is emitted when it closes, so a trainer killed outright (the OOM killer, SIGKILL, a
segfault, a lost node) takes its open ``train`` slice with it. A heartbeat's ``step`` keeps
the evidence: per attempt and rank, when the latest stepped heartbeat (step ``k`` at ``t``)
is beyond the ``step_end`` ``e`` of the rank's latest train span that ended by ``t``, and no
train span of the rank is active at ``t``, the rank trained ``[u, t)`` on steps ``[e, k)``,
``u`` being the latest end of any of the rank's spans that ended by ``t``. That *implied*
train span then counts in every later rule exactly like a reported one.

Two readings the spec leaves open, taken here on purpose (docs/explanation/attribution.md):

* **Ties.** The latest heartbeat is the one with the largest ``(ts, step)``; the latest train
  span ended by ``t`` is the one with the largest ``(end, step_end)``: the most progress the
  evidence supports.
* **A step going backwards.** When the latest heartbeat's step is lower than an earlier
  heartbeat's of the same attempt and rank, it is kept but implies nothing (the issue's "bad
  input" rule), and the rank counts once in the ``heartbeat_step_backwards`` anomaly.

The rule needs four facts per rank (:class:`RankFacts`), which the whole-job engine reads
off the rank's spans (:func:`facts_at`) and the stored refresh asks Postgres for
(``ettweb.rollups.implied_store``); :func:`implied_span` turns them into the span, so both
give the same one. No Django here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from collector.schema import TRAIN_PHASE

Event = dict[str, Any]

#: The anomaly a backwards latest heartbeat counts under (``engine.ANOMALY_KINDS``).
BACKWARDS: Final = "heartbeat_step_backwards"
#: An implied span's ``attrs``: it says where it came from on the job page and in exports.
IMPLIED_ATTRS: Final = "implied_by"
#: Longer than any valid event id (64), so an implied span's id never meets a reported one.
_ID_PAD: Final = "~" * 65


def implied_id(attempt: int, rank: int) -> str:
    """The id of an attempt and rank's implied span: one per pair, never a reported id."""
    return f"{_ID_PAD}implied/{attempt}/{rank}"


def is_implied(event: Event) -> bool:
    """Whether ``event`` is an implied span rather than one a trainer reported."""
    return str(event.get("id", "")).startswith(_ID_PAD)


@dataclass(frozen=True, slots=True)
class Beat:
    """A rank's latest stepped heartbeat of an attempt, and the highest step reported by
    its heartbeats before it (``None``: it is the first)."""

    event_id: str
    ts: float
    step: int
    earlier_max: int | None = None

    @property
    def backwards(self) -> bool:
        return self.earlier_max is not None and self.step < self.earlier_max


@dataclass(frozen=True, slots=True)
class RankFacts:
    """What rule 3 reads of a rank's spans of the attempt, at its latest heartbeat's ``t``:
    the latest train span ended by ``t`` (its end and ``step_end``; ``None``: none), the
    latest end of any span ended by ``t``, and whether a train span is active at ``t``."""

    train_end: float | None
    train_step_end: int | None
    last_end: float | None
    active: bool


def latest_beat(marks: Iterable[Event]) -> Beat | None:
    """The latest stepped heartbeat among one attempt and rank's marks (:class:`Beat`)."""
    beats = sorted((float(m["ts"]), int(m["step"]), str(m["id"])) for m in marks
                   if m.get("mark") == "heartbeat" and m.get("step") is not None)
    if not beats:
        return None
    ts, step, event_id = beats[-1]
    earlier = [s for t, s, _ in beats if t < ts]
    return Beat(event_id, ts, step, max(earlier) if earlier else None)


def facts_at(spans: Iterable[Event], t: float) -> RankFacts:
    """:class:`RankFacts` read off one attempt and rank's spans."""
    train: tuple[float, int] | None = None
    last_end: float | None = None
    active = False
    for span in spans:
        start, end = float(span["start"]), float(span["end"])
        is_train = span["phase"] == TRAIN_PHASE
        if end <= t:
            last_end = end if last_end is None else max(last_end, end)
            if is_train:
                here = (end, int(span["step_end"]))
                train = here if train is None else max(train, here)
        elif is_train and start <= t:
            active = True
    return RankFacts(train[0] if train else None, train[1] if train else None, last_end,
                     active)


def implied_span(job: str, attempt: int, rank: int, beat: Beat | None,
                 facts: RankFacts | None) -> Event | None:
    """Rule 3's span for one attempt and rank, or ``None`` when there is none."""
    if beat is None or facts is None or beat.backwards or facts.active:
        return None
    if facts.train_step_end is None or facts.last_end is None:
        return None  # no train span before it: where training began is unknown
    if beat.step <= facts.train_step_end:
        return None  # every slice closed: the heartbeat adds nothing
    return span_event(job, attempt, rank, beat, facts.last_end, facts.train_step_end)


def span_event(job: str, attempt: int, rank: int, beat: Beat, start: float,
               step_start: int) -> Event:
    """The implied span from ``start`` (``u``) and ``step_start`` (``e``) to ``beat``, as
    the sweep reads an event (also how the stored refresh rebuilds a kept one)."""
    return {"v": 1, "id": implied_id(attempt, rank), "job": job, "attempt": attempt,
            "kind": "span", "phase": TRAIN_PHASE, "start": start, "end": beat.ts,
            "step_start": step_start, "step_end": beat.step, "rank": rank,
            "blocking": True, "attrs": {IMPLIED_ATTRS: beat.event_id}}


def rank_progress(job: str, attempt: int, spans: Sequence[Event],
                  marks: Sequence[Event]) -> list[tuple[int, Beat, Event | None]]:
    """Per rank with a stepped heartbeat in one attempt, in rank order: its latest
    heartbeat (:class:`Beat`) and the span that implies (``None``: none)."""
    beats_of: dict[int, list[Event]] = {}
    for mark in marks:
        if mark["mark"] == "heartbeat" and mark.get("step") is not None:
            beats_of.setdefault(int(mark["rank"]), []).append(mark)
    if not beats_of:
        return []
    spans_of: dict[int, list[Event]] = {}
    for span in spans:
        if int(span["rank"]) in beats_of:
            spans_of.setdefault(int(span["rank"]), []).append(span)
    found: list[tuple[int, Beat, Event | None]] = []
    for rank in sorted(beats_of):
        beat = latest_beat(beats_of[rank])
        if beat is not None:
            facts = facts_at(spans_of.get(rank, ()), beat.ts)
            found.append((rank, beat, implied_span(job, attempt, rank, beat, facts)))
    return found


def implied_in_attempt(job: str, attempt: int, spans: Sequence[Event],
                       marks: Sequence[Event]) -> tuple[list[Event], int]:
    """Every rank's implied span of one attempt, in rank order, and how many ranks' latest
    heartbeat went backwards (the anomaly)."""
    progress = rank_progress(job, attempt, spans, marks)
    return ([span for _, _, span in progress if span is not None],
            sum(beat.backwards for _, beat, _ in progress))


def implied_in_job(job: str, events: Iterable[Event]) -> tuple[list[Event], int]:
    """:func:`implied_in_attempt` over one job's (deduplicated) events, attempt by attempt."""
    attempts: dict[int, tuple[list[Event], list[Event]]] = {}
    for event in events:
        spans, marks = attempts.setdefault(int(event["attempt"]), ([], []))
        (spans if event["kind"] == "span" else marks).append(event)
    implied: list[Event] = []
    backwards = 0
    for attempt in sorted(attempts):
        found, went_back = implied_in_attempt(job, attempt, *attempts[attempt])
        implied += found
        backwards += went_back
    return implied, backwards
