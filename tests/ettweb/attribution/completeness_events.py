"""Timelines that leave one phase out, for the completeness check's tests (pure and
through the database): each builder names its job and gives its events ids of their own, so
several of them can be stored side by side."""

from __future__ import annotations

from tests.ettweb.attribution.attribution_events import Timeline


def own_ids(t: Timeline) -> Timeline:
    """Ids unique across jobs (``Timeline`` numbers them per builder)."""
    for index, event in enumerate(t.events):
        event["id"] = f"{t.job}:{index}"
    return t


def restarted(*, load: bool = False, wait_s: float = 40.0, resume_step: int = 600,
              first_step: int = 0, job: str = "restarted") -> Timeline:
    """Attempt 0 trains 1,200 steps and fails; attempt 1 initializes its model, waits
    ``wait_s`` with nothing recorded (or loading, with ``load``), resumes at ``resume_step``."""
    t = Timeline(job)
    t.mark(0, "attempt_start", 0)
    t.span(0, "model_init", 0, 20)
    t.span(0, "compile", 20, 30)
    t.train(0, 30, 630, (first_step, first_step + 600))
    t.train(0, 630, 1230, (first_step + 600, first_step + 1200))
    t.mark(0, "attempt_end", 1240, status="failed")
    t.mark(1, "attempt_start", 1300)
    t.span(1, "model_init", 1300, 1320)
    if load:
        t.span(1, "checkpoint_load", 1320, 1320 + wait_s)
    t.train(1, 1320 + wait_s, 1920 + wait_s, (resume_step, resume_step + 600))
    t.mark(1, "attempt_end", 1920 + wait_s, status="completed")
    return own_ids(t)


def bare(startup_s: float = 100.0, *, scheduling_s: float = 0.0, job: str = "bare") -> Timeline:
    """Only train spans (and optionally a scheduler's span): start-up left out."""
    t = Timeline(job)
    t.mark(0, "attempt_start", 0)
    if scheduling_s:
        t.span(0, "scheduling", 0, scheduling_s)
    t.train(0, startup_s, startup_s + 600, (0, 3000))
    t.train(0, startup_s + 600, startup_s + 1200, (3000, 6000))
    t.mark(0, "attempt_end", startup_s + 1200, status="completed")
    return own_ids(t)


def slow_first(first_s: float, *, compile_span: bool = False, steady_steps: int = 600,
               steady_spans: int = 3, rank: int = 0, first_steps: int = 100,
               job: str = "slow") -> Timeline:
    """Start-up recorded; a first train span of ``first_steps`` lasting ``first_s``, then
    ``steady_spans`` spans at 0.1 s/step."""
    t = Timeline(job)
    t.mark(0, "attempt_start", 0)
    t.span(0, "model_init", 0, 10, rank=rank)
    if compile_span:
        t.span(0, "compile", 10, 12, rank=rank)
    t.train(0, 12, 12 + first_s, (0, first_steps), rank=rank)
    clock, step, each = 12 + first_s, first_steps, steady_steps // steady_spans
    for _ in range(steady_spans):
        t.train(0, clock, clock + 0.1 * each, (step, step + each), rank=rank)
        clock, step = clock + 0.1 * each, step + each
    t.mark(0, "attempt_end", clock, status="completed")
    return own_ids(t)


def paused(pause_s: float, pauses: int = 3, span_s: float = 1000.0,
           job: str = "paused") -> Timeline:
    """Train spans ``span_s`` long with ``pause_s`` of nothing recorded between them."""
    t = Timeline(job)
    t.mark(0, "attempt_start", 0)
    t.span(0, "model_init", 0, 10)
    t.span(0, "compile", 10, 20)
    clock, step = 20.0, 0
    for index in range(pauses + 1):
        if index:
            clock += pause_s
        t.train(0, clock, clock + span_s, (step, step + 1000))
        clock, step = clock + span_s, step + 1000
    t.mark(0, "attempt_end", clock, status="completed")
    return own_ids(t)
