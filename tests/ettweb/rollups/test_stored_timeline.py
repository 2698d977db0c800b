"""The refresh stores what the job page draws: each attempt's category timeline and rank
lanes, and each attempt's repeated steps; equal to the engine's, rewritten only on change."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from rollup_fleet import fleet

from ettweb.attribution.engine import attribute_job
from ettweb.attribution.lanes import LANE_TARGET, category_timeline, job_lanes
from ettweb.ingest.logic import ingest_lines
from ettweb.rollups.logic import (
    LANE_COLUMNS,
    TIMELINE_COLUMNS,
    _copy_columns,
    load_events,
    rebuild_all,
    refresh_jobs,
)
from ettweb.rollups.models import AttemptLane, AttemptRollup, AttemptTimeline, JobRollup
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.rank_events import ranked_job

pytestmark = pytest.mark.django_db


def _store(timeline: Timeline) -> None:
    refresh_jobs(ingest_lines(timeline.lines()).jobs)


def _stored(job: str) -> dict[str, Any]:
    return {
        "timeline": [(t.attempt, t.bin_s, [tuple(p) for p in t.pieces])
                     for t in AttemptTimeline.objects.filter(job_id=job).order_by("attempt")],
        "lanes": [(lane.attempt, lane.ranks, lane.rank_count, lane.bin_s,
                   [tuple(r) for r in lane.runs])
                  for lane in AttemptLane.objects.filter(job_id=job)
                  .order_by("attempt", "first_rank")],
        "repeated": dict(AttemptRollup.objects.filter(job_id=job)
                         .values_list("attempt", "repeated_steps")),
    }


def _engine(job: str) -> dict[str, Any]:
    events = load_events([job])[job]
    attribution = attribute_job(events)
    return {
        "timeline": [(t.attempt, t.bin_s, list(t.pieces))
                     for t in category_timeline(attribution.segments)],
        "lanes": [(lane.attempt, lane.label, len(lane.ranks), lane.bin_s, list(lane.runs))
                  for lane in job_lanes(attribution.attempts, events)],
        "repeated": {w.attempt: attribution.repeated_steps_by_attempt.get(w.attempt, 0)
                     for w in attribution.attempts},
    }


def test_the_stored_drawing_equals_the_engines() -> None:
    _store(worked_example())
    assert _stored("j1") == _engine("j1")
    stored = _stored("j1")
    assert stored["repeated"] == {0: 0, 1: 80}  # §3 worked example: attempt 1 redoes 80
    assert stored["timeline"][1][2][0] == ("restart_gap", 1083.0, 1090.0)
    assert [lane[:3] for lane in stored["lanes"]] == [(0, "0", 1), (1, "0", 1)]


def test_a_512_rank_job_whose_ranks_agree_stores_a_handful_of_lanes() -> None:
    job = ranked_job(512, job="wide", jitter_s=0.3, seed=11)
    _store(job)
    lanes = AttemptLane.objects.filter(job_id="wide")
    per_attempt: dict[int, int] = {}
    for lane in lanes:
        per_attempt[lane.attempt] = per_attempt.get(lane.attempt, 0) + 1
    assert set(per_attempt) == {0, 1} and max(per_attempt.values()) <= 4, per_attempt
    assert all(sum(lane.rank_count for lane in lanes if lane.attempt == a) == 512
               for a in (0, 1))
    assert lanes.get(attempt=0).ranks == "0-511"
    assert _stored("wide") == _engine("wide")
    assert LANE_TARGET >= 4


def test_ranks_that_differ_are_stored_as_their_own_lanes() -> None:
    _store(ranked_job(32, job="slow", slow={4, 5, 6, 20}))
    ranks = list(AttemptLane.objects.filter(job_id="slow", attempt=0)
                 .order_by("first_rank").values_list("ranks", "rank_count"))
    assert ranks == [("0-3, 7-19, 21-31", 28), ("4-6, 20", 4)]


def test_repeated_steps_per_attempt_sum_to_the_jobs() -> None:
    builder = fleet(seed=3, jobs=8)
    refresh_jobs(ingest_lines(builder.lines()).jobs)
    jobs = list(JobRollup.objects.all())
    assert any(job.repeated_steps for job in jobs)
    for job in jobs:
        per_attempt = AttemptRollup.objects.filter(job_id=job.job).values_list(
            "repeated_steps", flat=True)
        assert sum(per_attempt) == job.repeated_steps


def test_an_unchanged_drawing_is_not_rewritten_and_a_changed_one_is() -> None:
    t = worked_example()
    _store(t)
    before = list(AttemptLane.objects.values_list("pk", flat=True))
    digest = JobRollup.objects.get(job="j1").timeline_digest
    refresh_jobs(["j1"])  # nothing new: same digest, same rows
    assert list(AttemptLane.objects.values_list("pk", flat=True)) == before
    assert JobRollup.objects.get(job="j1").timeline_digest == digest
    late = Timeline("j1")
    late.span(1, "eval", 1113, 1120)
    late.mark(1, "attempt_end", 1120, status="completed")
    for number, event in enumerate(late.events):
        event["id"] = f"late-{number}"  # not the worked example's ids: new events
    _store(late)
    after = list(AttemptLane.objects.order_by("attempt").values_list("pk", flat=True))
    assert not set(after) & set(before)
    assert JobRollup.objects.get(job="j1").timeline_digest != digest
    assert _stored("j1") == _engine("j1")


def test_rebuild_all_stores_the_same_drawing_as_the_refresh() -> None:
    builder = fleet(seed=21, jobs=5)
    refresh_jobs(ingest_lines(builder.lines()).jobs)
    jobs = sorted(JobRollup.objects.values_list("job", flat=True))
    incremental = {job: _stored(job) for job in jobs}
    rebuild_all()
    assert {job: _stored(job) for job in jobs} == incremental
    assert all(incremental[job]["lanes"] and incremental[job]["timeline"] for job in jobs)


def test_the_drawing_rows_are_written_in_the_tables_column_order() -> None:
    assert _copy_columns(AttemptTimeline) == list(TIMELINE_COLUMNS)
    assert _copy_columns(AttemptLane) == list(LANE_COLUMNS)


def test_a_job_with_no_events_left_loses_its_drawing() -> None:
    _store(worked_example())
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ingest_event WHERE job = 'j1'")
    refresh_jobs(["j1"])
    assert not AttemptLane.objects.exists() and not AttemptTimeline.objects.exists()
