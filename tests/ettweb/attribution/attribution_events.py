"""Builders for schema-v1 events so each test reads like the timeline it checks.

Every event goes through ``collector.schema.validate_event``: the engine only ever sees
validated, normalized events, and the tests should feed it the same.
"""

from __future__ import annotations

import itertools
from typing import Any

from collector.schema import dump_event, validate_event

Event = dict[str, Any]


class Timeline:
    """Collects one fleet's events; ids are sequential so failures are easy to read."""

    def __init__(self, job: str = "j1") -> None:
        self.job = job
        self.events: list[Event] = []
        self._ids = itertools.count()

    def _add(self, raw: dict[str, Any]) -> Event:
        raw.setdefault("job", self.job)
        event = validate_event({"v": 1, "id": f"e{next(self._ids)}", **raw})
        self.events.append(event)
        return event

    def span(
        self, attempt: int, phase: str, start: float, end: float, *, rank: int = 0,
        steps: tuple[int, int] | None = None, blocking: bool = True, job: str | None = None,
    ) -> Event:
        raw: dict[str, Any] = {"attempt": attempt, "kind": "span", "phase": phase,
                               "start": start, "end": end, "rank": rank, "blocking": blocking}
        if steps is not None:
            raw["step_start"], raw["step_end"] = steps
        if job is not None:
            raw["job"] = job
        return self._add(raw)

    def train(self, attempt: int, start: float, end: float, steps: tuple[int, int],
              **kwargs: Any) -> Event:
        return self.span(attempt, "train", start, end, steps=steps, **kwargs)

    def mark(self, attempt: int, mark: str, ts: float, *, job: str | None = None,
             **attrs: Any) -> Event:
        raw: dict[str, Any] = {"attempt": attempt, "kind": "mark", "mark": mark, "ts": ts,
                               "attrs": attrs}
        if job is not None:
            raw["job"] = job
        return self._add(raw)

    def beat(self, attempt: int, ts: float, step: int | None = None, *, rank: int = 0) -> Event:
        """A heartbeat, with the last completed step when given."""
        raw: dict[str, Any] = {"attempt": attempt, "kind": "mark", "mark": "heartbeat",
                               "ts": ts, "rank": rank}
        if step is not None:
            raw["step"] = step
        return self._add(raw)

    def lines(self) -> list[str]:
        return [dump_event(event) for event in self.events]


def worked_example() -> Timeline:
    """ETT_SPEC §3 "A worked example", event for event."""
    t = Timeline("j1")
    t.mark(0, "attempt_start", 1000, gpus=4)
    t.span(0, "process_group_init", 1000, 1004)
    t.span(0, "compile", 1004, 1010)
    t.train(0, 1010, 1070, (0, 600))
    t.span(0, "checkpoint_save", 1070, 1072)
    t.train(0, 1072, 1080, (600, 680))
    t.mark(0, "heartbeat", 1080)
    t.mark(0, "attempt_end", 1083, status="failed")
    t.mark(1, "attempt_start", 1090)
    t.span(1, "checkpoint_load", 1090, 1093)
    t.train(1, 1093, 1113, (600, 800))
    t.mark(1, "attempt_end", 1113, status="completed")
    return t


def hard_kill_example() -> Timeline:
    """ETT_SPEC §3 rule 3 worked by hand (docs/explanation/attribution.md): an attempt
    killed outright after a closed slice, a save and heartbeats at steps 640 and 680; a
    second killed before closing any slice; a third that resumes from step 600.

    By hand: attempt 0's heartbeat at 1070 (step 680) implies train 1062-1070 on steps
    600-680 (u = the save's end), productive; attempt 1 has no train span, so its heartbeat
    implies nothing (1083-1090 unattributed); attempt 2 re-trains 600-680 of its 600-800
    (f = 0.4: 8 s repeated, 12 s productive). Productive 60 + 8 + 12 = 80 s of 123 s wall
    (65.04%), repeated_steps 80, restart_gap 20, checkpoint_load 6, checkpoint_save 2,
    unattributed 7, repeated_training 8; two failures (both ``lost``), recovering in
    1070 -> 1111 = 41 s and 1090 -> 1111 = 21 s.
    """
    t = Timeline("hard-kill")
    t.mark(0, "attempt_start", 1000, gpus=4)
    t.train(0, 1000, 1060, (0, 600))
    t.span(0, "checkpoint_save", 1060, 1062)
    t.beat(0, 1066, 640)
    t.beat(0, 1070, 680)
    t.mark(1, "attempt_start", 1080)
    t.span(1, "checkpoint_load", 1080, 1083)
    t.beat(1, 1090, 640)
    t.mark(2, "attempt_start", 1100)
    t.span(2, "checkpoint_load", 1100, 1103)
    t.train(2, 1103, 1123, (600, 800))
    t.mark(2, "attempt_end", 1123, status="completed")
    return t
