"""``JobAttribution.repeated_steps_by_attempt``: the steps each attempt trained again, which
the job page lists per restart; always summing to the job's ``repeated_steps`` (§3.7)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from ettweb.attribution.engine import attribute_job
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.test_properties import job_events
from tests.examples import examples


@settings(max_examples=examples(300), deadline=None)
@given(job_events())
def test_repeated_steps_per_attempt_sum_to_the_total(events: list[dict[str, Any]]) -> None:
    job = attribute_job(events)
    assert sum(job.repeated_steps_by_attempt.values()) == job.repeated_steps
    assert all(steps > 0 for steps in job.repeated_steps_by_attempt.values())
    assert set(job.repeated_steps_by_attempt) <= {w.attempt for w in job.attempts}


def test_the_worked_example_repeats_80_steps_in_attempt_1() -> None:
    job = attribute_job(worked_example().events)
    assert job.repeated_steps_by_attempt == {1: 80} and job.repeated_steps == 80


def test_a_rollback_inside_an_attempt_counts_for_that_attempt() -> None:
    t = Timeline()
    t.train(0, 0, 10, (0, 100))
    t.train(0, 10, 20, (50, 150))   # in-process rollback: 50 steps again, in attempt 0
    t.mark(0, "attempt_end", 20, status="failed")
    t.train(1, 30, 40, (120, 200))  # restart from step 120: 30 steps again, in attempt 1
    job = attribute_job(t.events)
    assert job.repeated_steps_by_attempt == {0: 50, 1: 30} and job.repeated_steps == 80
