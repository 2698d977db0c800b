"""What the adapters' real-run tests share: the test's own clock, and the spool through the
real ingest path.

Why a clock of the test's own: the adapters' numbers are checked against what the test saw
happen, not against the adapter's arithmetic. :class:`RunClock` records, with ``time.time()``
and the framework's step counter, when each attempt started and ended, when each training
step started and ended, when the run crashed, and every save and evaluation (the test times
those in its own Trainer subclass). From that alone it computes the job's ETT% the way
ETT_SPEC §3 defines it: training of new steps over the job's wall time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.spool import unframe


@dataclass
class RunClock:
    """One job's attempts as the test measured them (epoch seconds)."""

    started: dict[int, float] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)
    crashed: dict[int, float] = field(default_factory=dict)
    #: attempt -> [(global steps done before the step, start, end or None)]
    steps: dict[int, list[list[Any]]] = field(default_factory=dict)
    #: saves and evaluations, not training: ``(kind, start, end)``.
    excluded: list[tuple[str, float, float]] = field(default_factory=list)

    def step_start(self, attempt: int, step: int) -> None:
        self.steps.setdefault(attempt, []).append([step, time.time(), None])

    def step_end(self, attempt: int) -> None:
        self.steps[attempt][-1][2] = time.time()

    @contextmanager
    def not_training(self, kind: str) -> Iterator[None]:
        """Time a save or an evaluation (``kind``) as the test sees it."""
        start = time.time()
        try:
            yield
        finally:
            self.exclude(kind, start, time.time())

    def exclude(self, kind: str, start: float, end: float) -> None:
        self.excluded.append((kind, start, end))

    def intervals(self, kind: str) -> list[tuple[float, float]]:
        return sorted((start, end) for k, start, end in self.excluded if k == kind)

    # ------------------------------------------------------------------ what it adds up to
    def _training(self) -> list[tuple[float, float]]:
        """The stretches between saves and evaluations in which a step ended.

        A stretch in which no step ended is not training (ETT_SPEC §2: training is reported
        as train spans with step ranges, and ``TrainTracker`` drops a slice in which no step
        completed): an evaluation's set-up right after a save, the moments between the last
        pause and a crash.
        """
        ends = sorted(end for steps in self.steps.values() for _, _, end in steps if end)
        pauses = [(start, end) for _, start, end in self.excluded]
        for attempt, steps in self.steps.items():  # before the first step, after the last
            pauses += [(self.started[attempt], steps[0][1]),
                       (self.trained_until(attempt), self.ended[attempt])]
        pauses.sort()
        edges = [self.started[min(self.started)]]
        for start, end in pauses:
            edges += [start, end]
        edges.append(max(self.ended.values()))
        stretches = list(zip(edges[::2], edges[1::2], strict=True))
        return [(start, end) for start, end in stretches
                if any(start < e <= end for e in ends)]

    def _training_s(self, start: float, end: float) -> float:
        """Training seconds in ``[start, end]``."""
        return sum(max(0.0, min(end, e) - max(start, s)) for s, e in self._training())

    def trained_until(self, attempt: int) -> float:
        """Where the attempt's training stopped: its crash, else its last step's end."""
        if attempt in self.crashed:
            return self.crashed[attempt]
        end = self.steps[attempt][-1][2]
        assert end is not None
        return float(end)

    def steps_done(self, attempt: int) -> int:
        """The global step an attempt reached (its last completed step)."""
        done = [step + 1 for step, _, end in self.steps[attempt] if end is not None]
        return max(done)

    def expected(self) -> Expected:
        """ETT% and repeated steps by ETT_SPEC §3, from the test's own measurements."""
        attempts = sorted(self.started)
        productive = repeated = 0.0
        high_water = 0
        repeated_steps = 0
        for attempt in attempts:
            steps = self.steps.get(attempt, [])
            if not steps:
                continue
            first = steps[0][1]
            productive += self._training_s(first, self.trained_until(attempt))
            resumed_at = steps[0][0]
            if resumed_at < high_water:  # the steps below the high-water mark train again
                repeated_steps += high_water - resumed_at
                again_until = next(end for step, _, end in steps if step == high_water - 1)
                repeated += self._training_s(first, again_until)
            high_water = max(high_water, self.steps_done(attempt))
        productive -= repeated
        wall = self.ended[attempts[-1]] - self.started[attempts[0]]
        return Expected(ett_pct=100.0 * productive / wall, wall_s=wall,
                        productive_s=productive, repeated_s=repeated,
                        repeated_steps=repeated_steps)


@dataclass(frozen=True)
class Expected:
    ett_pct: float
    wall_s: float
    productive_s: float
    repeated_s: float
    repeated_steps: int


def spool_files(spool: Path) -> list[Path]:
    return sorted(path for path in spool.iterdir() if path.name.endswith(".jsonl"))


def spool_events(spool: Path) -> list[dict[str, Any]]:
    """Every event the Reporter wrote, in time order."""
    events = [json.loads(unframe(line)) for path in spool_files(spool)
              for line in path.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda e: (e.get("start", e.get("ts")), e["id"]))


def ingest_spool(spool: Path, job: str) -> Any:
    """The spool through the real ingest path (``manage.py ett_import``'s functions), then
    the job's numbers from the query layer."""
    from ettweb.ingest.imports import import_lines, read_lines, refresh_imported
    from ettweb.queries import JobQuery, JobResult, calculate

    lines = [line for path in spool_files(spool) for line in read_lines(path)]
    summary = import_lines(lines, source="import:adapter-test", workers=1)
    assert (summary.rejected, summary.duplicates) == (0, 0), summary.reasons
    assert summary.jobs == (job,)
    refresh_imported(summary.jobs, workers=1)
    result = calculate(JobQuery(job=job))
    assert isinstance(result, JobResult), result
    return result


#: What a crashed-then-resumed run must show on its job page besides productive time.
LOST_CATEGORIES = ("checkpoint_save", "checkpoint_load", "eval", "restart_gap",
                   "repeated_training", "model_init", "data_init")


def assert_resumed_run_matches(result: Any, expected: Expected, *, model: str,
                               team: str) -> None:
    """A crash and a resume, as the query layer reads them, against the test's own clock:
    attempts failed then completed, the repeated steps exactly, wall and ETT% within 1%,
    and every lifecycle category the run went through."""
    headline = result.headline
    assert [a.status for a in headline.attempts] == ["failed", "completed"]
    assert headline.repeated_steps == expected.repeated_steps
    assert headline.wall_s == pytest.approx(expected.wall_s, rel=0.01)
    assert headline.ett_pct == pytest.approx(expected.ett_pct, rel=0.01)
    # The clock and the adapter stamp a step with two calls; a preemption between them on a
    # loaded machine shifts the seconds by milliseconds, a wrong rule by a whole step or more.
    assert headline.lost_s["repeated_training"] == pytest.approx(expected.repeated_s, abs=0.02), (
        headline.lost_s["repeated_training"], expected.repeated_s)
    assert result.meta.model == model and result.meta.team == team
    for category in LOST_CATEGORIES:
        assert headline.lost_s.get(category, 0) > 0, (category, headline.lost_s)


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def assert_spans_hold(spans: list[dict[str, Any]], measured: list[tuple[float, float]], *,
                      around: bool = True, slack_s: float = 0.005) -> None:
    """One span per interval the test measured, each within ``slack_s`` of it at both ends;
    ``around``: the span also contains it (the adapter times the call the test's own timing
    sits inside)."""
    assert len(spans) == len(measured), (spans, measured)
    for span, (start, end) in zip(sorted(spans, key=lambda s: s["start"]), measured,
                                  strict=True):
        assert abs(span["start"] - start) <= slack_s, (span, start, end)
        assert abs(span["end"] - end) <= slack_s, (span, start, end)
        if around:
            assert span["start"] <= start and end <= span["end"], (span, start, end)
