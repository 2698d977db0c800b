"""TorchTitan training logs → schema-v1 events.

Why: TorchTitan (``pytorch/torchtitan``) logs its whole life per rank through one logger
(``[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s``; torchrun puts
``[rankN]:`` before it), and teams keep those logs. The milestones in them are enough to
rebuild a job's lifecycle: the job's start (``Starting job: …``, or ``torchtitan version:
…`` since 0.3), the device mesh, the dataset and the model being built, ``Trainer is
initialized``, a checkpoint loaded (``Loading the checkpoint …`` / ``Finished loading the
checkpoint in X seconds.``), ``Training starts at step N``, a step line every
``log_freq`` steps (``step: N  loss: …  memory: …  tps: …``), checkpoint saves (``Saving
the checkpoint …`` / ``Finished saving the checkpoint … in X seconds.``), validation
(``validate step: N …``), torch.compile announced (``Compiling each TransformerBlock with
torch.compile``), and ``Training completed``.

Each start line begins a new attempt of that rank; a log has no job id, so ``--job`` (or
the file's name) names it. Log times carry no zone: they are read as UTC. Mapping table:
``docs/instrument.md``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ettweb.importers.common import (
    Interval,
    Options,
    Translation,
    Window,
    mark,
    span,
    training,
    utc_seconds,
)

FORMAT: Final = "torchtitan"
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_LINE: Final = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?:\[titan\]\s*)?(?P<Y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d) "
    r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)[,.](?P<f>\d+) - (?P<logger>\S+) - "
    r"(?P<level>[A-Z]+) - (?P<message>.*)$")
_START: Final = re.compile(r"^(?:Starting job:|torchtitan version:)")
#: Milestones that open a setup phase, lasting until the next milestone.
SETUP: Final = ((re.compile(r"^Building (?:\d+-D )?device mesh"), "process_group_init"),
                (re.compile(r"^(?:Preparing \S+ dataset|Building dataloader)"), "data_init"),
                (re.compile(r"^Building (?!\d+-D |device mesh)"), "model_init"))
_SETUP_DONE: Final = re.compile(r"^Trainer is initialized")
_LOAD: Final = re.compile(r"^Loading the checkpoint")
_LOADED: Final = re.compile(r"^Finished loading the checkpoint in (?P<s>[\d.]+) ?seconds")
_SAVE: Final = re.compile(r"^(?:Saving|Staging) (?:the|a full|a model only) checkpoint")
_SAVED: Final = re.compile(r"^(?:Finished (?:saving|staging) the checkpoint.*?in "
                           r"(?P<s>[\d.]+) ?seconds|Last step checkpoint completed in "
                           r"(?P<last>[\d.]+) ?s)")
_TRAINING_STARTS: Final = re.compile(r"^Training starts at step (?P<step>\d+)")
_STEP: Final = re.compile(r"^step:\s*(?P<step>\d+)\b")
_VALIDATE: Final = re.compile(r"^validate step:\s*(?P<step>\d+)\b")
_COMPILE: Final = re.compile(r"^(?:Compiling .* with torch\.compile|Applied JIT compilation)")
_COMPLETED: Final = re.compile(r"^Training completed")
_DESTROYED: Final = re.compile(r"^Process group destroyed")
_FAILED_LEVELS: Final = ("ERROR", "CRITICAL")
#: What a log record of another logger (or another tool) must not be read as.
_NOT_TITAN_MILESTONE: Final = frozenset({"DEBUG"})


@dataclass
class _Attempt:
    """One run of one rank, from its start line to its end (or the next start line)."""

    number: int
    start: float
    setup: tuple[str, float] | None = None  # the open setup phase
    load: float | None = None
    save: float | None = None
    steps_from: tuple[float, int] | None = None  # last progress report: (time, steps done)
    intervals: list[Interval] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    compile: bool = False
    last: float = 0.0
    error: tuple[float, str] | None = None
    completed: float | None = None


class _Rank:
    """The events of one rank's lines, attempt by attempt."""

    def __init__(self, job: str, rank: int, gpus: int, out: Translation) -> None:
        self.job, self.rank, self.gpus, self.out = job, rank, gpus, out
        self.attempt: _Attempt | None = None
        self.count = 0

    def _span(self, phase: str, start: float, end: float, **extra: Any) -> None:
        assert self.attempt is not None
        self.out.events.append(span(FORMAT, self.job, self.attempt.number, phase,
                                    min(start, end), end, rank=self.rank, **extra))

    def line(self, ts: float, level: str, message: str) -> bool:
        """Read one record; False when it is no milestone (a skipped line)."""
        if _START.match(message):
            self.close()
            self.attempt = _Attempt(self.count, ts, setup=("process_group_init", ts), last=ts)
            self.count += 1
            self.out.events.append(mark(FORMAT, self.job, self.attempt.number, "attempt_start",
                                        ts, rank=self.rank, attrs={"gpus": self.gpus}))
            return True
        attempt = self.attempt
        if attempt is None:
            return False
        attempt.last = max(attempt.last, ts)
        if level in _FAILED_LEVELS:
            attempt.error = attempt.error or (ts, message[:200])
            return True
        return self._milestone(attempt, ts, message)

    def _end_setup(self, attempt: _Attempt, ts: float) -> None:
        if attempt.setup is not None:
            phase, began = attempt.setup
            self._span(phase, began, ts)
            attempt.setup = None

    def _milestone(self, attempt: _Attempt, ts: float, message: str) -> bool:
        for pattern, phase in SETUP:
            if pattern.match(message):
                self._end_setup(attempt, ts)
                attempt.setup = (phase, ts)
                return True
        if _SETUP_DONE.match(message):
            self._end_setup(attempt, ts)
        elif _LOAD.match(message):
            self._end_setup(attempt, ts)
            attempt.load = ts
        elif loaded := _LOADED.match(message):
            began = attempt.load if attempt.load is not None else ts - float(loaded["s"])
            self._span("checkpoint_load", began, ts)
            attempt.load = None
        elif started := _TRAINING_STARTS.match(message):
            self._end_setup(attempt, ts)
            attempt.steps_from = (ts, int(started["step"]) - 1)
        elif step := _STEP.match(message):
            self._progress(attempt, ts, int(step["step"]))
        elif _SAVE.match(message):
            attempt.save = ts
        elif saved := _SAVED.match(message):
            seconds = float(saved["s"] or saved["last"])
            began = attempt.save if attempt.save is not None else ts - seconds
            self._span("checkpoint_save", began, ts)
            attempt.windows.append((began, ts))
            attempt.save = None
        elif _VALIDATE.match(message):
            # Validation runs after a step's training (and its save): it began when they ended.
            since = [attempt.steps_from[0] if attempt.steps_from else attempt.start]
            began = max(since + [end for _, end in attempt.windows if end <= ts])
            self._span("eval", began, ts)
            attempt.windows.append((began, ts))
        elif _COMPILE.match(message):
            attempt.compile = True
        elif _COMPLETED.match(message):
            attempt.completed = ts
        elif _DESTROYED.match(message) and attempt.completed is not None:
            self._span("shutdown", attempt.completed, ts)
            attempt.completed = ts
        else:
            return False
        return True

    def _progress(self, attempt: _Attempt, ts: float, done: int) -> None:
        """``step: N``: N steps are done; the training since the last report is one interval."""
        if attempt.steps_from is not None:
            began, before = attempt.steps_from
            if done > before:
                attempt.intervals.append(Interval(began, ts, (before, done)))
        attempt.steps_from = (ts, done)

    def close(self) -> None:
        """The attempt's training spans, then its end: ``completed`` after ``Training
        completed``, ``failed`` after an ERROR record, else none (the next attempt makes it
        ``lost``, ETT_SPEC §3.1)."""
        attempt = self.attempt
        if attempt is None:
            return
        self._end_setup(attempt, attempt.last)
        self.out.events.extend(training(FORMAT, self.job, attempt.number, attempt.intervals,
                                        attempt.windows, rank=self.rank,
                                        compile_first=attempt.compile))
        if attempt.completed is not None:
            self.out.events.append(mark(FORMAT, self.job, attempt.number, "attempt_end",
                                        attempt.completed, rank=self.rank,
                                        attrs={"status": "completed"}))
        elif attempt.error is not None:
            self.out.events.append(mark(FORMAT, self.job, attempt.number, "attempt_end",
                                        attempt.last, rank=self.rank,
                                        attrs={"status": "failed", "error": attempt.error[1]}))
        self.attempt = None


def translate(lines: Iterable[str], options: Options) -> Translation:
    """Translate TorchTitan log lines (one rank's, or several ranks' with ``[rankN]:``)."""
    out = Translation()
    job = options.job_or(None)
    records: dict[int, list[tuple[float, int, str, str]]] = defaultdict(list)
    for number, line in enumerate(lines, start=1):
        out.lines += 1
        text = _ANSI.sub("", line)
        found = _LINE.match(text)
        if not found:
            out.skipped += 1
            continue
        try:
            ts = utc_seconds(int(found["Y"]), int(found["m"]), int(found["d"]), int(found["H"]),
                             int(found["M"]), int(found["S"]), found["f"])
        except ValueError as exc:
            out.reject(number, line, f"torchtitan: bad log time ({exc})")
            continue
        rank = int(found["rank"] or 0)
        records[rank].append((ts, number, found["level"], found["message"].strip()))
    for rank, own in sorted(records.items()):
        state = _Rank(job, rank, options.gpus, out)
        for ts, _, level, message in sorted(own):
            if level in _NOT_TITAN_MILESTONE or not state.line(ts, level, message):
                out.skipped += 1
        state.close()
    return out
