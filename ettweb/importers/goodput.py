"""Google's goodput library (``ml-goodput-measurement``) entries → schema-v1 events.

Why: TPU and GPU jobs built on MaxText and similar trainers already record their lifecycle
with ``GoodputRecorder``: one Cloud Logging entry per call, each a JSON object with the job's
``job_name`` and one time (``job_start_time``, ``step_start_time`` + ``step_count``,
``tpu_init_start_time``/``_end_time``, ``training_prep_*``, ``data_loading_*``,
``custom_badput_event_*`` + ``custom_badput_event_type``), beside Orbax's checkpoint logger
entries (``event_type`` ``save`` with ``checkpoint_manager_blocking_start_time`` and
``_duration_secs``, ``restore`` with ``checkpoint_manager_start_time`` and
``_duration_secs``). An export of them, one JSON object a line (the payload itself, or a
Cloud Logging entry holding it as ``jsonPayload``), is this format.

The library's own rules are kept where ETT has the same notion: each ``job_start_time``
begins an attempt; step ``N`` runs from its start to the next step's start; data loading
before an attempt's first step blocks (after it, it overlaps training: ``blocking: false``);
the first step's excess over the median step is compilation (its "program startup"). A
step that restarts below the steps already trained is repeated training, per ETT_SPEC §3.
Mapping table: ``docs/instrument.md``.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

from ettweb.importers.common import (
    UNATTRIBUTED,
    Interval,
    Options,
    Translation,
    Window,
    mark,
    span,
    training,
)

FORMAT: Final = "goodput"
#: ``<name>_start_time`` / ``<name>_end_time`` pairs and the ETT phase of each.
PHASES: Final = {"tpu_init": "process_group_init", "training_prep": "model_init",
                 "data_loading": "data_init"}
#: ``custom_badput_event_type`` values with an ETT phase (case-insensitive); any other
#: type is an ``unattributed`` span carrying the type.
CUSTOM_PHASES: Final = {"eval_step": "eval", "eval": "eval", "evaluation": "eval",
                        "compile": "compile", "compilation": "compile",
                        "recompilation": "compile", "checkpoint_save": "checkpoint_save",
                        "checkpoint_restore": "checkpoint_load",
                        "checkpoint_load": "checkpoint_load"}
#: Orbax's step statistics: (start, duration) fields, the checkpoint manager's first.
_SAVE_FIELDS: Final = (("checkpoint_manager_blocking_start_time",
                        "checkpoint_manager_blocking_duration_secs"),
                       ("checkpointer_blocking_start_time", "checkpointer_blocking_duration_secs"))
_RESTORE_FIELDS: Final = (("checkpoint_manager_start_time", "checkpoint_manager_duration_secs"),
                          ("checkpointer_start_time", "checkpointer_duration_secs"))
_ORBAX: Final = {"save": ("checkpoint_save", _SAVE_FIELDS),
                 "restore": ("checkpoint_load", _RESTORE_FIELDS),
                 "emergency_restore": ("checkpoint_load", _RESTORE_FIELDS)}
CUSTOM: Final = "custom_badput_event"


class _Bad(ValueError):
    """An entry of the format with a value that cannot be used; the message is the reason."""


@dataclass(frozen=True)
class _Entry:
    line: int
    ts: float
    kind: str  # job_start, job_end, step, open, close, window
    name: str = ""  # the pair (tpu_init, custom:<type>) or the window's phase
    step: int = 0
    end: float = 0.0
    attrs: dict[str, Any] = field(default_factory=dict)


def _time(payload: dict[str, Any], key: str) -> float:
    value = payload[key]
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise _Bad(f"goodput: '{key}' must be epoch seconds (a number >= 0)")
    return float(value)


def _step(payload: dict[str, Any]) -> int:
    value = payload.get("step_count", payload.get("step"))
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise _Bad("goodput: 'step_start_time' without a 'step_count' >= 0")


def _orbax(number: int, payload: dict[str, Any]) -> list[_Entry]:
    phase, pairs = _ORBAX[payload["event_type"]]
    for start_key, duration_key in pairs:
        if start_key in payload and duration_key in payload:
            start = _time(payload, start_key)
            attrs = {"orbax_step": payload["step"]} if type(payload.get("step")) is int else {}
            return [_Entry(number, start, "window", phase,
                           end=start + _time(payload, duration_key), attrs=attrs)]
    raise _Bad(f"goodput: Orbax {payload['event_type']} entry without "
               f"'{pairs[0][0]}' and '{pairs[0][1]}'")


def _entries(number: int, payload: dict[str, Any]) -> list[_Entry]:
    """The entries one payload holds (usually one); raises _Bad for an unusable value."""
    found: list[_Entry] = []
    if "job_start_time" in payload:
        found.append(_Entry(number, _time(payload, "job_start_time"), "job_start"))
    if "job_end_time" in payload:
        found.append(_Entry(number, _time(payload, "job_end_time"), "job_end"))
    if "step_start_time" in payload:
        found.append(_Entry(number, _time(payload, "step_start_time"), "step",
                            step=_step(payload)))
    for name in (*PHASES, CUSTOM):
        pair = name
        if name == CUSTOM:
            kind = payload.get(f"{CUSTOM}_type", "unknown")
            pair = f"custom:{kind if isinstance(kind, str) and kind else 'unknown'}"
        for edge, which in (("start", "open"), ("end", "close")):
            if f"{name}_{edge}_time" in payload:
                found.append(_Entry(number, _time(payload, f"{name}_{edge}_time"), which,
                                    pair))
    if payload.get("event_type") in _ORBAX:
        found.extend(_orbax(number, payload))
    return found


def _payload(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"goodput: bad JSON ({exc})") from None
    if isinstance(obj, dict) and isinstance(obj.get("jsonPayload"), dict):
        obj = obj["jsonPayload"]  # a Cloud Logging entry, as exported
    if not isinstance(obj, dict):
        raise _Bad("goodput: line is not a JSON object")
    return obj


def translate(lines: Iterable[str], options: Options) -> Translation:
    """Translate exported goodput (and Orbax) entries into events, job by job."""
    out = Translation()
    by_job: dict[str | None, list[_Entry]] = defaultdict(list)
    for number, line in enumerate(lines, start=1):
        out.lines += 1
        if not line.strip():
            out.skipped += 1
            continue
        try:
            payload = _payload(line)
            entries = _entries(number, payload)
        except _Bad as exc:
            out.reject(number, line, str(exc))
            continue
        if not entries:
            out.skipped += 1
        job = payload.get("job_name")
        by_job[job if isinstance(job, str) and job else None].extend(entries)
    named = [job for job in by_job if job is not None]
    if None in by_job:  # entries without a job_name belong to the file's one job, if one
        orphans = by_job.pop(None)
        by_job[named[0] if len(named) == 1 else None].extend(orphans)
    jobs: dict[str, list[_Entry]] = defaultdict(list)
    for found, entries in by_job.items():
        jobs[options.job_or(found)].extend(entries)
    for job, entries in sorted(jobs.items()):
        _Job(job, options.gpus, out).build(entries)
    return out


class _Job:
    """One job's entries in time order, split into attempts at each ``job_start_time``."""

    def __init__(self, job: str, gpus: int, out: Translation) -> None:
        self.job, self.gpus, self.out = job, gpus, out

    def build(self, entries: list[_Entry]) -> None:
        entries.sort(key=lambda e: (e.ts, e.line))
        starts = [e.ts for e in entries if e.kind == "job_start"]
        attempts: dict[int, list[_Entry]] = defaultdict(list)
        for entry in entries:
            attempts[max(bisect_right(starts, entry.ts) - 1, 0)].append(entry)
        for attempt, own in sorted(attempts.items()):
            self._attempt(attempt, own)

    def _span(self, attempt: int, phase: str, start: float, end: float, *,
              blocking: bool = True, attrs: dict[str, Any] | None = None) -> None:
        self.out.events.append(span(FORMAT, self.job, attempt, phase, start, end,
                                    blocking=blocking, attrs=attrs))

    def _attempt(self, attempt: int, entries: list[_Entry]) -> None:
        steps = [(e.ts, e.step) for e in entries if e.kind == "step"]
        first_step = steps[0][0] if steps else math.inf
        ends = [e.ts for e in entries if e.kind == "job_end"]
        windows: list[Window] = []
        opened: dict[str, _Entry] = {}
        for entry in entries:
            if entry.kind == "job_start":
                self.out.events.append(mark(FORMAT, self.job, attempt, "attempt_start",
                                            entry.ts, attrs={"gpus": self.gpus}))
            elif entry.kind == "window":
                self._span(attempt, entry.name, entry.ts, entry.end, attrs=entry.attrs or None)
                windows.append((entry.ts, entry.end))
            elif entry.kind == "open":
                if entry.name in opened:
                    self._unpaired(attempt, opened[entry.name])
                opened[entry.name] = entry
            elif entry.kind == "close":
                began = opened.pop(entry.name, None)
                if began is None:
                    self._unpaired(attempt, entry)
                else:
                    self._pair(attempt, began, entry, first_step, windows)
        for entry in opened.values():
            self._unpaired(attempt, entry)
        self.out.events.extend(training(FORMAT, self.job, attempt,
                                        _intervals(steps, ends), windows, compile_first=True))
        if steps and not (ends and ends[-1] > steps[-1][0]):
            # The last step never finished (the attempt ended inside it): its start is the
            # last sign of life, kept as a heartbeat.
            self.out.events.append(mark(FORMAT, self.job, attempt, "heartbeat", steps[-1][0],
                                        attrs={"step_started": steps[-1][1]}))
        if ends:
            self.out.events.append(mark(FORMAT, self.job, attempt, "attempt_end", ends[-1],
                                        attrs={"status": "completed"}))

    def _pair(self, attempt: int, began: _Entry, ended: _Entry, first_step: float,
              windows: list[Window]) -> None:
        if began.name.startswith("custom:"):
            kind = began.name.removeprefix("custom:")
            phase = CUSTOM_PHASES.get(kind.lower(), UNATTRIBUTED)
            self._span(attempt, phase, began.ts, ended.ts, attrs={"badput_type": kind})
            windows.append((began.ts, ended.ts))  # custom badput blocks training
        elif began.name == "data_loading" and began.ts >= first_step:
            self._span(attempt, PHASES[began.name], began.ts, ended.ts, blocking=False)
        else:
            self._span(attempt, PHASES[began.name], began.ts, ended.ts)

    def _unpaired(self, attempt: int, entry: _Entry) -> None:
        """A start with no end (the attempt died inside it) or an end with no start: kept as
        an empty ``unattributed`` span at its time, never dropped."""
        self._span(attempt, UNATTRIBUTED, entry.ts, entry.ts,
                   attrs={"source_event": f"{entry.name} {entry.kind}"})


def _intervals(steps: list[tuple[float, int]], ends: list[float]) -> list[Interval]:
    """Step ``N`` runs from its start to the next step's start (the attempt's end for the
    last); steps reported sparsely cover the steps between them."""
    intervals: list[Interval] = []
    for (start, step), (end, after) in pairwise(steps):
        intervals.append(Interval(start, end, (step, after if after > step else step + 1)))
    if steps and ends and ends[-1] > steps[-1][0]:
        start, step = steps[-1]
        intervals.append(Interval(start, ends[-1], (step, step + 1)))
    return intervals
