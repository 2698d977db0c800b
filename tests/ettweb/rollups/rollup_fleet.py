"""A small seeded fleet for rollup tests: restarts, several ranks, UTC midnights, GPUs.

Every event goes through ``collector.schema`` (validate + dump) so the lines are exactly what
a Reporter would send. Jobs run hours to days so per-day splits are exercised; statuses cover
completed, failed, preempted, lost (no attempt_end) and running (the last attempt is open).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from collector.schema import dump_event, validate_event

DAY_S = 86400.0
#: 2026-03-01T00:00:00Z: a round UTC midnight, so day boundaries are easy to reason about.
EPOCH = 1772323200.0
MODELS = ("dlrm", "dhen")
TEAMS = ("ads", "feed", "search")
CLUSTERS = ("east", "west")
GPU_CHOICES = (1, 4, 8, 16, 128)


class FleetBuilder:
    """Collects validated events; ids are unique per builder."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count()

    def add(self, **raw: Any) -> None:
        self.events.append(validate_event({"v": 1, "id": f"ev{next(self._ids)}", **raw}))

    def span(self, job: str, attempt: int, phase: str, start: float, end: float,
             **extra: Any) -> None:
        self.add(job=job, attempt=attempt, kind="span", phase=phase, start=start, end=end,
                 **extra)

    def mark(self, job: str, attempt: int, mark: str, ts: float, **extra: Any) -> None:
        self.add(job=job, attempt=attempt, kind="mark", mark=mark, ts=ts, **extra)

    def lines(self) -> list[str]:
        return [dump_event(event) for event in self.events]


def _attempt(b: FleetBuilder, rng: random.Random, job: str, attempt: int, t: float,
             step: int, gpus: int, last: bool) -> tuple[float, int]:
    """One attempt from start to its end (or open); returns (end time, checkpointed step)."""
    b.mark(job, attempt, "attempt_start", t,
           attrs={"gpus": gpus, "model": rng.choice(MODELS), "team": rng.choice(TEAMS),
                  "cluster": rng.choice(CLUSTERS)})
    t += rng.uniform(0, 60)  # unattributed: nobody reported this stretch
    for phase in ("process_group_init", "model_init", "compile"):
        d = rng.uniform(10, 900)
        b.span(job, attempt, phase, t, t + d)
        b.span(job, attempt, phase, t, t + d * 0.5, rank=1)
        t += d
    if attempt:
        d = rng.uniform(30, 600)
        b.span(job, attempt, "checkpoint_load", t, t + d)
        t += d
    checkpoint = step
    for _ in range(rng.randint(2, 6)):
        d = rng.uniform(1800, 6 * 3600)  # long slices cross UTC midnights
        steps = int(d)
        b.span(job, attempt, "train", t, t + d, step_start=step, step_end=step + steps)
        b.span(job, attempt, "train", t, t + d, step_start=step, step_end=step + steps, rank=1)
        step += steps
        t += d
        d = rng.uniform(20, 300)
        b.span(job, attempt, "checkpoint_save", t, t + d)
        b.span(job, attempt, "publish", t, t + 2 * d, blocking=False)
        checkpoint = step
        t += d
    if rng.random() < 0.5:  # trains past the checkpoint, then crashes: repeated on restart
        d = rng.uniform(600, 3600)
        b.span(job, attempt, "train", t, t + d, step_start=step, step_end=step + int(d))
        t += d
    b.mark(job, attempt, "heartbeat", t, step=step)
    if last and rng.random() < 0.2:
        return t, checkpoint  # still running
    tail = rng.uniform(5, 120)
    status = "completed" if last else rng.choice(("failed", "preempted", "lost"))
    if status != "lost":
        b.mark(job, attempt, "attempt_end", t + tail, attrs={"status": status})
    return t + tail, checkpoint


def fleet(seed: int = 7, jobs: int = 12) -> FleetBuilder:
    """``jobs`` jobs starting over four days, 1-3 attempts each."""
    rng = random.Random(seed)
    b = FleetBuilder()
    for number in range(jobs):
        job = f"job-{number:03d}"
        t = EPOCH + rng.uniform(0, 4 * DAY_S)
        gpus = rng.choice(GPU_CHOICES)
        attempts = rng.randint(1, 3)
        step = 0
        for attempt in range(attempts):
            end, step = _attempt(b, rng, job, attempt, t, step, gpus,
                                 last=attempt == attempts - 1)
            t = end + rng.uniform(30, 1800)  # restart gap
    return b


def in_lockstep(bodies: Sequence[Callable[[threading.Barrier], None]],
                timeout_s: float = 120.0) -> list[BaseException]:
    """Run each body in its own thread with a shared barrier (the bodies meet at it between
    rounds); returns what they raised. A body that fails aborts the barrier, so the others
    stop instead of waiting; each thread closes its database connections."""
    from django.db import connections

    barrier = threading.Barrier(len(bodies))
    errors: list[BaseException] = []

    def run(body: Callable[[threading.Barrier], None]) -> None:
        try:
            body(barrier)
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return errors
