"""What every translator shares: its options, its result, stable event ids, UTC times, and
training intervals cut around blocking work.

Why one module: the three formats differ in how they say things, not in what ETT needs from
them. Each must give the same job, attempts, ranks, closed spans and marks, and each event an
id that depends only on what the event says (ETT_SPEC §2: a repeated id is the same event and
counts once), so importing a file twice, or two overlapping files, stores nothing new.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, Final

from collector.schema import SCHEMA_VERSION, TRAIN_PHASE, Event

#: What ETT calls time it cannot give an owner (ETT_SPEC §4: component ``unknown``). A
#: translator emits it for what a format says but ETT cannot map, so nothing is dropped.
UNATTRIBUTED: Final = "unattributed"
MAX_JOB_CHARS: Final = 200
#: Suffixes taken off a file name to make the default job id (``run7.log.gz`` → ``run7``).
_SUFFIXES: Final = (".gz", ".jsonl", ".json", ".log", ".txt", ".out", ".err")
#: Event fields an id is made from. ``attrs`` too, but not the GPU count an option supplies:
#: importing again with another ``--gpus`` must not store a second ``attempt_start``.
_ID_FIELDS: Final = ("job", "attempt", "rank", "kind", "phase", "mark", "start", "end", "ts",
                     "step_start", "step_end", "step", "blocking")

Window = tuple[float, float]  # (start, end), epoch seconds


@dataclass(frozen=True)
class Options:
    """What a log may not say. ``source``: the file's name (the default job id of a log that
    names none); ``job``: the job id of every event, overriding the log's; ``gpus``: GPUs per
    attempt where the log does not tell."""

    source: str = ""
    job: str | None = None
    gpus: int = 1

    def job_or(self, found: str | None) -> str:
        """The job id: the option, else what the log said, else the file's name."""
        return (self.job or found or job_from_file_name(self.source))[:MAX_JOB_CHARS]


@dataclass(frozen=True)
class Rejected:
    """A line of the format that cannot be read: kept with its reason, never dropped."""

    line: int  # 1-based
    raw: str
    reason: str


@dataclass
class Translation:
    """One file translated. ``events`` are schema-v1 dicts; ``rejected`` the lines that look
    like the format but cannot be read; ``lines`` the lines read and ``skipped`` those that are
    no event of the format (a log's other output), counted for the summary line."""

    events: list[Event] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    lines: int = 0
    skipped: int = 0

    @property
    def unattributed(self) -> int:
        """How many events are ``unattributed`` spans: what the format said that ETT could
        not map (shown in the summary line)."""
        return sum(1 for event in self.events if event.get("phase") == UNATTRIBUTED)

    def reject(self, line: int, raw: str, reason: str) -> None:
        self.rejected.append(Rejected(line, raw, reason))


def job_from_file_name(source: str) -> str:
    """``/logs/llama-run7.log.gz`` → ``llama-run7``: a log that names no job is named by its
    file (give ``--job`` when one run's attempts are in several files)."""
    name = PurePath(source).name
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name or "imported"


def _event_id(fmt: str, event: Event) -> str:
    """``<format>-<40 hex>``: a SHA-256 of what the event says, so the same event always gets
    the same id and an import is idempotent."""
    attrs = {k: v for k, v in event.get("attrs", {}).items() if k != "gpus"}
    key = [event.get(name) for name in _ID_FIELDS]
    text = json.dumps([fmt, key, attrs], sort_keys=True, separators=(",", ":"))
    return f"{fmt}-{hashlib.sha256(text.encode()).hexdigest()[:40]}"


def finish(fmt: str, fields: dict[str, Any]) -> Event:
    """A complete schema-v1 event from ``fields`` (job, attempt, kind, ...): version and id
    added, in the order the schema lists them."""
    event: Event = {"v": SCHEMA_VERSION, "id": "", **fields}
    event["id"] = _event_id(fmt, event)
    return event


def span(fmt: str, job: str, attempt: int, phase: str, start: float, end: float, *,
         rank: int = 0, blocking: bool = True, steps: tuple[int, int] | None = None,
         attrs: dict[str, Any] | None = None) -> Event:
    """A span event; ``steps`` ([start, end) global steps) for a ``train`` span."""
    fields: dict[str, Any] = {"job": job, "attempt": attempt, "kind": "span", "phase": phase,
                              "start": float(start), "end": float(end), "rank": rank}
    if steps is not None:
        fields["step_start"], fields["step_end"] = steps
    if not blocking:
        fields["blocking"] = False
    if attrs:
        fields["attrs"] = attrs
    return finish(fmt, fields)


def train(fmt: str, job: str, attempt: int, start: float, end: float, steps: tuple[int, int],
          *, rank: int = 0, attrs: dict[str, Any] | None = None) -> Event:
    return span(fmt, job, attempt, TRAIN_PHASE, start, end, rank=rank, steps=steps,
                attrs=attrs)


def mark(fmt: str, job: str, attempt: int, name: str, ts: float, *, rank: int = 0,
         attrs: dict[str, Any] | None = None) -> Event:
    """A mark event (``attempt_start``, ``attempt_end``, ``heartbeat``)."""
    fields: dict[str, Any] = {"job": job, "attempt": attempt, "kind": "mark", "mark": name,
                              "ts": float(ts), "rank": rank}
    if attrs:
        fields["attrs"] = attrs
    return finish(fmt, fields)


def utc_seconds(year: int, month: int, day: int, hour: int, minute: int, second: int,
                fraction: str = "") -> float:
    """Epoch seconds of a UTC wall-clock time; ``fraction`` is the digits after the point.
    Raises ValueError for a time that does not exist (month 13, second 61)."""
    whole = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    return whole + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def cut(start: float, end: float, steps: tuple[int, int],
        windows: Sequence[Window]) -> list[tuple[float, float, int, int]]:
    """The parts of a training interval ``[start, end]`` outside ``windows`` (blocking work
    done inside it: a checkpoint save, an evaluation), as ``(start, end, step_start,
    step_end)``.

    ETT_SPEC §3 counts a piece as training whenever a ``train`` span is active, so a save
    inside one would vanish into training time. The interval's steps are shared out in
    proportion to each part's length, so they add up to the interval's; a part may get none.
    When the windows cover the whole interval, one empty span at its end keeps the steps
    (the high-water mark of §3 needs them).
    """
    parts: list[Window] = []
    at = start
    for low, high in sorted(windows):
        low, high = max(low, start), min(high, end)
        if high <= low or high <= at:  # outside the interval, or inside a window before
            continue
        if low > at:
            parts.append((at, low))
        at = high
    if at < end:
        parts.append((at, end))
    first, last = steps
    total = sum(high - low for low, high in parts)
    if total <= 0:
        return [(end, end, first, last)]
    pieces: list[tuple[float, float, int, int]] = []
    done, step = 0.0, first
    for index, (low, high) in enumerate(parts):
        done += high - low
        share = (last - first) * done / total
        after = last if index == len(parts) - 1 else first + int(share + 0.5)  # half up
        pieces.append((low, high, step, after))
        step = after
    return pieces


def median(values: Sequence[float]) -> float | None:
    """The median, or None for no values (no statistics module: this is a hot path)."""
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def compile_split(start: float, end: float, steps: int,
                  typical_step_s: float | None) -> float | None:
    """Where compilation ends in an attempt's first training interval, or None.

    Dynamo and XLA compile lazily, inside the first step. Like the goodput library's
    program-startup badput, the first interval's excess over ``steps`` typical steps (the
    attempt's median step time) is taken as compilation; without a typical step, or with no
    excess, nothing is.
    """
    if typical_step_s is None or steps < 0:
        return None
    boundary = end - steps * typical_step_s
    return boundary if boundary > start else None


@dataclass(frozen=True)
class Interval:
    """Training between two progress reports: ``[start, end)`` trained global steps
    ``steps`` (``[first, last)``)."""

    start: float
    end: float
    steps: tuple[int, int]

    @property
    def count(self) -> int:
        return self.steps[1] - self.steps[0]


def _inside(interval: Interval, windows: Sequence[Window]) -> float:
    return sum(max(0.0, min(high, interval.end) - max(low, interval.start))
               for low, high in windows)


def training(fmt: str, job: str, attempt: int, intervals: Sequence[Interval],
             windows: Sequence[Window], *, rank: int = 0,
             compile_first: bool = False) -> list[Event]:
    """``train`` spans for an attempt's training ``intervals`` (in time order), cut around
    its blocking ``windows``; with ``compile_first``, the first interval's excess over the
    attempt's typical step (:func:`compile_split`) becomes a ``compile`` span."""
    ordered = sorted(windows)
    starts = [low for low, _ in ordered]
    longest = max((high - low for low, high in ordered), default=0.0)

    def near(interval: Interval) -> list[Window]:
        """The windows that may overlap ``interval`` (found by bisection: a history has
        one interval per step and a window per save, so all pairs would be quadratic)."""
        return ordered[bisect_left(starts, interval.start - longest):
                       bisect_left(starts, interval.end)]

    events: list[Event] = []
    typical = median([(i.end - i.start - _inside(i, near(i))) / i.count
                      for i in intervals[1:] if i.count > 0])
    for index, interval in enumerate(intervals):
        start, inside = interval.start, near(interval)
        if index == 0 and compile_first:
            boundary = compile_split(start, interval.end - _inside(interval, inside),
                                     interval.count, typical)
            if boundary is not None:
                events.append(span(fmt, job, attempt, "compile", start, boundary, rank=rank,
                                   attrs={"estimated": "first steps beyond the median step"}))
                start = boundary
        for low, high, first, last in cut(start, interval.end, interval.steps, inside):
            events.append(train(fmt, job, attempt, low, high, (first, last), rank=rank))
    return events
