"""A small fleet whose component numbers are easy to compute by hand (GPU-hours).

2026-03-01 is a Sunday, so Mar 1 and Mar 2 fall in different ISO weeks.

* ``a`` 1 GPU, model m1, team ads, Mar 1: compile 00-02, checkpoint_save 02-03, train 03-12.
  Wall 12, compile 2, checkpointing 1, productive 9.
* ``b`` 4 GPUs, model m2, team feed, Mar 2: compile 00-01, train 01-06.
  Wall 24, compile 4, productive 20.
* ``c`` 2 GPUs, model m1, team ads, Mar 2: checkpoint_load 00-01, train 01-04 (running).
  Wall 8, checkpointing 2, productive 6.
* ``d`` 2 GPUs, model m3, team ads, Mar 3: compile 00-01, train 01-05.
  Wall 10, compile 2, productive 8.

Fleet wall per day: 12, 32, 10 (54); fleet lost: 3 + 4 + 2 + 2 = 11.
"""

from __future__ import annotations

import json
from typing import Any

from ettweb.ingest.tasks import ingest_batch
from tests.conftest import mark, span

H = 3600.0
MAR1 = 1772323200.0  # 2026-03-01T00:00:00Z
MAR2, MAR3 = MAR1 + 24 * H, MAR1 + 48 * H


def _job(job: str, start: float, meta: dict[str, Any], phases: list[tuple[str, float]],
         status: str | None = "completed") -> list[dict[str, Any]]:
    """Contiguous phases from ``start`` (hours each); ``train`` spans get steps."""
    events, cursor, step = [mark(job, 0, "attempt_start", start, attrs=meta)], start, 0
    for phase, hours in phases:
        extra = {"step_start": step, "step_end": step + int(hours * 100)} \
            if phase == "train" else {}
        events.append(span(job, 0, phase, cursor, cursor + hours * H, **extra))
        cursor += hours * H
        step += int(hours * 100) if phase == "train" else 0
    if status is not None:
        events.append(mark(job, 0, "attempt_end", cursor, attrs={"status": status}))
    return events


def events() -> list[dict[str, Any]]:
    return [
        *_job("a", MAR1, {"gpus": 1, "model": "m1", "team": "ads", "cluster": "east"},
              [("compile", 2), ("checkpoint_save", 1), ("train", 9)]),
        *_job("b", MAR2, {"gpus": 4, "model": "m2", "team": "feed", "cluster": "west"},
              [("compile", 1), ("train", 5)]),
        *_job("c", MAR2, {"gpus": 2, "model": "m1", "team": "ads", "cluster": "east"},
              [("checkpoint_load", 1), ("train", 3)], status=None),
        *_job("d", MAR3, {"gpus": 2, "model": "m3", "team": "ads", "cluster": "east"},
              [("compile", 1), ("train", 4)]),
    ]


def ingest_fleet() -> None:
    ingest_batch([json.dumps({"v": 1, "id": f"cf{i}", **event})
                  for i, event in enumerate(events())])
