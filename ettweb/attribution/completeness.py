"""The completeness check: which phases a job's events seem to leave out.

Why: a forgotten span does not make time vanish — ETT_SPEC §3 puts it in ``unattributed``,
or, inside a train span, in training — so ETT% stays honest, but an owner cannot tell a
trainer that loads no checkpoint from one that loads it unrecorded, nor a job that compiles
nothing from one whose compile hides in its first training span. The attribution already
sees where the unexplained time sits: before training resumes, in a first training span far
slower than the rest, between two known phases. This module turns those patterns into
findings that name the attempt, the seconds involved and what to instrument; the job page
and its API show them (``docs/instrument.md``, "Check a job's instrumentation").

Pure Python, no Django. The inputs are what a rollup refresh holds anyway: the attempt
windows, the job page's category timeline (so a finding matches what the page draws) and,
per attempt, :class:`PhaseFacts`: the span phases seen and the lowest rank's training pace,
kept per chunk of the timeline and folded over chunks with the rest of a chunk's summary
(``chunk_summary``). :func:`check_job` runs the whole check from one job's events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Final

from collector.schema import TRAIN_PHASE

from .bounds import capped
from .components import PRODUCTIVE
from .engine import (
    REPEATED_TRAINING,
    RESTART_GAP,
    UNATTRIBUTED,
    AttemptWindow,
    Event,
    attribute_job,
)
from .lanes import Piece, Timeline, category_timeline

#: A finding about an attempt's start-up or its first training span involves at least this
#: many seconds. Below it, the time a process takes to import and launch cannot be told from
#: a missing span, and ten seconds are not worth instrumenting for anyone.
MIN_FINDING_S: Final = 10.0
#: Start-up "looks uninstrumented" when at least this share of the time before an attempt's
#: first training is unattributed: a trainer that records its start-up leaves only slivers
#: between its phases, one that records nothing leaves all of it.
STARTUP_UNATTRIBUTED_SHARE: Final = 0.5
#: The trainer's own start-up phases (§4): an attempt with any of them records its start-up,
#: so unexplained time there is a gap between phases, not a start-up left out. ``scheduling``
#: and ``container_start`` are not among them: a scheduler or wrapper records those, not the
#: trainer, and they say nothing about the trainer's instrumentation.
STARTUP_PHASES: Final = frozenset({"rendezvous", "process_group_init", "model_init",
                                   "sharding_plan", "data_init", "compile", "checkpoint_load"})
#: The first training span "hides a compile" when its seconds per step exceed the attempt's
#: steady pace (its other train spans) by this factor: compiling (tracing, code generation,
#: autotuning) costs many steps' worth, while warm-up (allocator, caches, the first batch)
#: stays within twice or so of the steady pace.
SLOW_FIRST_FACTOR: Final = 3.0
#: The steady pace is only trusted from at least this many steps in at least this many
#: train spans after the first: one short or odd span must not set it.
MIN_STEADY_STEPS: Final = 50
MIN_STEADY_SPANS: Final = 2
#: Unattributed time between the same two phases of one attempt is reported when it adds up
#: to at least ``MIN_GAP_S`` and ``GAP_SHARE`` of the attempt's wall time. Both: every trainer
#: leaves milliseconds between spans, which add up over a long attempt to seconds that are
#: no share of it, and a short attempt's few seconds are a share but not worth a span.
MIN_GAP_S: Final = 60.0
GAP_SHARE: Final = 0.02

#: Every kind of finding, with what it means (the docs' table holds the same).
FINDING_KINDS: Final[dict[str, str]] = {
    "checkpoint_load_missing":
        "a restarted attempt resumed training past the job's first step with no "
        "checkpoint_load span, and time before its training is unattributed",
    "startup_uninstrumented":
        "most of the time before an attempt's first training is unattributed and the "
        "attempt has no start-up span",
    "compile_folded":
        "an attempt's first train span runs far slower per step than its later ones and "
        "the attempt has no compile span",
    "unattributed_gap":
        "unattributed time between the same two phases adds up to a share of an attempt",
}
#: What a finding's neighbour is called when it is the start or the end of the attempt.
ATTEMPT_START: Final = "attempt start"
ATTEMPT_END: Final = "attempt end"
_TRAINING: Final = frozenset({PRODUCTIVE, REPEATED_TRAINING})


@dataclass(frozen=True, slots=True)
class TrainLead:
    """The lowest rank's train spans of one attempt: its earliest span and the sums of all.

    One rank, because each rank's first span is slow when compile hides in it: mixing ranks
    would blur the steady pace. The lowest, because every rank of a data-parallel job trains
    at one pace and rank 0 is the one every trainer reports from. Sums fold over chunks.
    """

    rank: int
    first_start: float
    first_end: float
    first_step_start: int
    first_step_end: int
    spans: int
    steps: int
    seconds: float

    def merged(self, other: TrainLead) -> TrainLead:
        """Both parts' facts together (the lower rank's alone when the ranks differ)."""
        if self.rank != other.rank:
            return self if self.rank < other.rank else other
        first = min(self, other, key=_first_key)
        return TrainLead(self.rank, first.first_start, first.first_end,
                         first.first_step_start, first.first_step_end,
                         self.spans + other.spans, capped(self.steps + other.steps),
                         self.seconds + other.seconds)


def _first_key(lead: TrainLead) -> tuple[float, float, int, int]:
    return (lead.first_start, lead.first_end, lead.first_step_start, lead.first_step_end)


@dataclass(frozen=True, slots=True)
class PhaseFacts:
    """What one attempt's spans say about its instrumentation; folds over chunks."""

    phases: frozenset[str]
    lead: TrainLead | None = None

    def merged(self, other: PhaseFacts) -> PhaseFacts:
        lead = (other.lead if self.lead is None else self.lead if other.lead is None
                else self.lead.merged(other.lead))
        return PhaseFacts(self.phases | other.phases, lead)

    def to_json(self) -> dict[str, Any]:
        lead = self.lead
        return {"p": sorted(self.phases),
                "l": None if lead is None else [
                    lead.rank, lead.first_start, lead.first_end, lead.first_step_start,
                    lead.first_step_end, lead.spans, lead.steps, lead.seconds]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PhaseFacts:
        lead = raw["l"]
        return cls(frozenset(raw["p"]), None if lead is None else TrainLead(
            int(lead[0]), float(lead[1]), float(lead[2]), int(lead[3]), int(lead[4]),
            int(lead[5]), int(lead[6]), float(lead[7])))


def phase_facts(spans: Iterable[Event]) -> PhaseFacts:
    """The facts of one attempt's spans (validated, normalized events of kind ``span``)."""
    spans = list(spans)
    phases = frozenset(map(_PHASE, spans))
    if TRAIN_PHASE not in phases:
        return PhaseFacts(phases)
    # C-level passes (itemgetter, map): this runs on every event a refresh summarizes.
    train = [span for span in spans if span["phase"] == TRAIN_PHASE]
    rank = min(map(_RANK, train))
    mine = [span for span in train if span["rank"] == rank]
    first = min(mine, key=_FIRST)
    return PhaseFacts(phases, TrainLead(
        rank, float(first["start"]), float(first["end"]), int(first["step_start"]),
        int(first["step_end"]), len(mine),
        capped(sum(map(_STEP_END, mine)) - sum(map(_STEP_START, mine))),
        sum(map(_END, mine)) - sum(map(_START, mine))))


_PHASE: Final = itemgetter("phase")
_RANK: Final = itemgetter("rank")
_FIRST: Final = itemgetter("start", "end", "step_start", "step_end")
_START: Final = itemgetter("start")
_END: Final = itemgetter("end")
_STEP_START: Final = itemgetter("step_start")
_STEP_END: Final = itemgetter("step_end")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing that looks missing from one attempt's events (``kind`` in ``FINDING_KINDS``).

    ``seconds``: the time involved (unattributed seconds, or for ``compile_folded`` the first
    span's seconds above the steady pace). ``step``: where training resumed (a restarted
    attempt); ``before``/``after`` and ``gaps``: the phases around an unattributed gap and how
    many such gaps; ``pace_s``: the steady seconds per step.
    """

    kind: str
    attempt: int
    seconds: float
    step: int | None = None
    before: str = ""
    after: str = ""
    gaps: int = 0
    pace_s: float | None = None

    @property
    def message(self) -> str:
        """The finding in one line, as the job page shows it."""
        took = _duration(self.seconds)
        if self.kind == "checkpoint_load_missing":
            return (f"Attempt {self.attempt}: checkpoint_load looks missing: {took} "
                    f"unattributed before training resumed at step {self.step}")
        if self.kind == "startup_uninstrumented":
            resumed = "" if self.step is None else f", resuming at step {self.step}"
            return (f"Attempt {self.attempt}: startup looks uninstrumented: {took} "
                    f"unattributed before training{resumed}, and no start-up span")
        if self.kind == "compile_folded":
            return (f"Attempt {self.attempt}: compile looks folded into the first training "
                    f"span ({took} above the steady rate of {self.pace_s or 0.0:.3g} s/step)")
        where = f" ({self.gaps} gaps)" if self.gaps > 1 else ""
        return (f"Attempt {self.attempt}: {took} unattributed between {self.before} and "
                f"{self.after}{where}")

    @property
    def advice(self) -> str:
        """What to instrument about it."""
        if self.kind == "checkpoint_load_missing":
            return ("Wrap the checkpoint restore in a checkpoint_load span "
                    "(reporter.phase(\"checkpoint_load\"); the adapters record it).")
        if self.kind == "startup_uninstrumented":
            load = ", checkpoint_load" if self.step is not None else ""
            return ("Wrap start-up in its phases: process_group_init, model_init, data_init, "
                    f"compile{load} (the adapters record them).")
        if self.kind == "compile_folded":
            return ("Record compilation as a compile span (collector.integrations.torch."
                    "install hooks Dynamo), or open the first train span after warm-up.")
        return _gap_advice(self.before, self.after)

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"kind": self.kind, "attempt": self.attempt,
                               "seconds": self.seconds}
        for name in ("step", "before", "after", "gaps", "pace_s"):
            value = getattr(self, name)
            if value not in (None, "", 0):
                raw[name] = value
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Finding:
        return cls(kind=str(raw["kind"]), attempt=int(raw["attempt"]),
                   seconds=float(raw["seconds"]), step=raw.get("step"),
                   before=str(raw.get("before", "")), after=str(raw.get("after", "")),
                   gaps=int(raw.get("gaps", 0)), pace_s=raw.get("pace_s"))


def _gap_advice(before: str, after: str) -> str:
    if before == after == TRAIN_PHASE:
        return ("Something runs between train spans with no span open (evaluation, logging, "
                "a data stall): wrap it in its phase, or keep the train span open across it.")
    if before == ATTEMPT_START:
        return (f"Nothing is recorded from the attempt's start to {after}: wrap what runs "
                "first (container_start, rendezvous, process_group_init) in its phase.")
    if after == ATTEMPT_END:
        return (f"Nothing is recorded from {before} to the attempt's end: wrap the teardown "
                "(a final checkpoint_save, eval, publish, shutdown) in its phase.")
    return f"Wrap what runs between {before} and {after} in a span of its phase."


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# --------------------------------------------------------------------------- the check

def check(windows: Sequence[AttemptWindow], timelines: Sequence[Timeline],
          facts: Mapping[int, PhaseFacts | None]) -> list[Finding] | None:
    """The findings of one job, attempt by attempt (each attempt's largest first).

    ``windows``: the attempt windows (§3.1) in attempt order; ``timelines``: the job page's
    category timeline (restart gaps included); ``facts``: each attempt's facts. ``None``
    when an attempt's facts are not known (chunks stored before the check existed): the
    job was not checked, which is not the same as complete.
    """
    if any(facts.get(window.attempt) is None for window in windows):
        return None
    rows = {row.attempt: row.pieces for row in timelines}
    findings: list[Finding] = []
    first_step: int | None = None  # the job's lowest first training step so far
    for index, window in enumerate(windows):
        attempt_facts = facts[window.attempt]
        assert attempt_facts is not None
        pieces = [piece for piece in rows.get(window.attempt, ()) if piece[0] != RESTART_GAP]
        resumed = _resumed_at(index, attempt_facts, first_step)
        found, covered = _start_up(window, pieces, attempt_facts, resumed)
        found += _compile_folded(window, attempt_facts)
        found += _gaps(window, pieces, covered)
        findings += sorted(found, key=lambda f: (-f.seconds, f.kind))
        if attempt_facts.lead is not None:
            step = attempt_facts.lead.first_step_start
            first_step = step if first_step is None else min(first_step, step)
    return findings


def check_job(events: Iterable[Event]) -> list[Finding]:
    """The findings of one job from its validated, normalized events (tests, offline use)."""
    events = list(events)
    attribution = attribute_job(events)
    spans: dict[int, list[Event]] = {window.attempt: [] for window in attribution.attempts}
    for event in events:
        if event["kind"] == "span":
            spans.setdefault(event["attempt"], []).append(event)
    facts: dict[int, PhaseFacts | None] = {a: phase_facts(s) for a, s in spans.items()}
    found = check(attribution.attempts, category_timeline(attribution.segments), facts)
    assert found is not None  # every attempt's facts come from its events
    return found


def _resumed_at(index: int, facts: PhaseFacts, first_step: int | None) -> int | None:
    """The step a later attempt resumed training at, when past the job's first training
    step (so it restored state from somewhere); ``None`` for a fresh start.

    Past the job's first step, not past step 0: a trainer counting steps from 1 (or a job
    resuming a previous job's run) starts every attempt there without loading anything.
    """
    if index == 0 or facts.lead is None:
        return None
    step = facts.lead.first_step_start
    return step if step > (first_step or 0) else None


def _start_up(window: AttemptWindow, pieces: Sequence[Piece], facts: PhaseFacts,
              resumed: int | None) -> tuple[list[Finding], float | None]:
    """Start-up left out, or a restarted attempt's checkpoint load left out; and, when
    found, where training began (the unattributed time before it is explained)."""
    train_at = next((start for category, start, _ in pieces if category in _TRAINING), None)
    if train_at is None:
        return [], None
    before = [(category, max(start, window.start), min(end, train_at))
              for category, start, end in pieces if start < train_at]
    total = sum(end - start for _, start, end in before if end > start)
    unattributed = sum(end - start for category, start, end in before
                       if category == UNATTRIBUTED and end > start)
    if unattributed < MIN_FINDING_S:
        return [], None
    if (unattributed >= STARTUP_UNATTRIBUTED_SHARE * total
            and not facts.phases & STARTUP_PHASES):
        return [Finding("startup_uninstrumented", window.attempt, unattributed,
                        step=resumed)], train_at
    if resumed is not None and "checkpoint_load" not in facts.phases:
        return [Finding("checkpoint_load_missing", window.attempt, unattributed,
                        step=resumed)], train_at
    return [], None


def _compile_folded(window: AttemptWindow, facts: PhaseFacts) -> list[Finding]:
    """A first train span far slower per step than the attempt's steady pace, no compile."""
    lead = facts.lead
    if lead is None or "compile" in facts.phases:
        return []
    first_steps = lead.first_step_end - lead.first_step_start
    first_s = lead.first_end - lead.first_start
    rest_steps, rest_s = lead.steps - first_steps, lead.seconds - first_s
    if (first_steps < 1 or rest_steps < MIN_STEADY_STEPS or lead.spans - 1 < MIN_STEADY_SPANS
            or rest_s <= 0.0):
        return []
    pace = rest_s / rest_steps
    above = first_s - first_steps * pace
    if first_s / first_steps <= SLOW_FIRST_FACTOR * pace or above < MIN_FINDING_S:
        return []
    return [Finding("compile_folded", window.attempt, above, pace_s=pace)]


def _gaps(window: AttemptWindow, pieces: Sequence[Piece],
          covered: float | None) -> list[Finding]:
    """Unattributed time between the same two phases, summed per pair in the attempt;
    what lies before ``covered`` is explained by a start-up finding already."""
    groups: dict[tuple[str, str], list[float]] = {}
    for index, (category, start, end) in enumerate(pieces):
        if category != UNATTRIBUTED or (covered is not None and end <= covered):
            continue
        before = _label(pieces[index - 1][0]) if index > 0 else ATTEMPT_START
        after = _label(pieces[index + 1][0]) if index + 1 < len(pieces) else ATTEMPT_END
        group = groups.setdefault((before, after), [0.0, 0])
        group[0] += end - start
        group[1] += 1
    return [Finding("unattributed_gap", window.attempt, seconds, before=before, after=after,
                    gaps=int(count))
            for (before, after), (seconds, count) in groups.items()
            if seconds >= MIN_GAP_S and seconds >= GAP_SHARE * window.duration_s]


def _label(category: str) -> str:
    """A neighbour of a gap by the phase that ran there (training is ``train``)."""
    return TRAIN_PHASE if category in _TRAINING else category
