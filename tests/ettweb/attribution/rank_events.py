"""A job of many ranks for the rank-lane tests: two attempts, every rank through the same
phases, with optional jitter (ranks disagreeing by a fraction of a second, as real ones do)
and optional slow ranks (a real difference: their model_init takes a minute longer)."""

from __future__ import annotations

import random
from collections.abc import Collection

from tests.ettweb.attribution.attribution_events import Timeline

#: Attempt 0 trains steps 0-300 until 400 s, saves at 300; it fails after a heartbeat at
#: 405 (attempt_end 410). Attempt 1 starts at 440, loads, re-trains 300 steps, completes.
SLOW_EXTRA_S = 60.0


def ranked_job(ranks: int, *, job: str = "ranks", jitter_s: float = 0.0, seed: int = 0,
               slow: Collection[int] = (), gpus: int | None = None) -> Timeline:
    rng = random.Random(seed)

    def j() -> float:
        return rng.uniform(0.0, jitter_s) if jitter_s else 0.0

    t = Timeline(job)
    t.mark(0, "attempt_start", 0.0, gpus=gpus or ranks)
    for rank in range(ranks):
        extra = SLOW_EXTRA_S if rank in slow else 0.0
        t.span(0, "rendezvous", 0.0, 5.0 + j(), rank=rank)
        t.span(0, "model_init", 5.0 + j(), 20.0 + extra + j(), rank=rank)
        t.span(0, "compile", 20.0 + extra + j(), 100.0 + j(), rank=rank)
        t.train(0, 100.0 + j(), 300.0 + j(), (0, 200), rank=rank)
        t.span(0, "checkpoint_save", 300.0 + j(), 310.0 + j(), rank=rank)
        t.train(0, 310.0 + j(), 400.0 + j(), (200, 300), rank=rank)
    t.mark(0, "heartbeat", 405.0)
    t.mark(0, "attempt_end", 410.0, status="failed")
    t.mark(1, "attempt_start", 440.0)
    for rank in range(ranks):
        loaded = 470.0 + j()
        t.span(1, "checkpoint_load", 440.0, loaded, rank=rank)
        t.train(1, loaded, 700.0, (200, 500), rank=rank)
    t.mark(1, "attempt_end", 700.0, status="completed")
    return _own_ids(t)


def staggered_job(ranks: int, *, job: str = "staggered") -> Timeline:
    """Each rank compiles 40 s longer than the one before: as many lanes as ranks in
    attempt 0 (a job page folds them); attempt 1 is one rank training: one lane."""
    t = Timeline(job)
    t.mark(0, "attempt_start", 0, gpus=ranks)
    for rank in range(ranks):
        t.span(0, "compile", 0, 50 + 40 * rank, rank=rank)
        t.train(0, 50 + 40 * rank, 1000, (0, 100), rank=rank)
    t.mark(0, "attempt_end", 1000, status="failed")
    t.mark(1, "attempt_start", 1010)
    t.train(1, 1010, 1100, (100, 120))
    return _own_ids(t)


def _own_ids(t: Timeline) -> Timeline:
    """Ids unique across jobs (``Timeline`` numbers them per builder): two of these jobs in
    one database must not share an id, or the second's events count as repeats."""
    for event in t.events:
        event["id"] = f"{t.job}:{event['id']}"
    return t
