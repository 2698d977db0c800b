"""The refresh stores what the job page draws: each attempt's category timeline, each
chunk's rank lanes and each attempt's repeated steps; equal to the engine's, rewritten only
on change."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from rollup_fleet import fleet

from ettweb.attribution import chunk_refresh
from ettweb.attribution.engine import attribute_job
from ettweb.attribution.lanes import LANE_TARGET, category_timeline, job_lanes
from ettweb.ingest.batches import ingest_lines
from ettweb.rollups import chunk_store
from ettweb.rollups.copying import copy_columns
from ettweb.rollups.job_rows import TIMELINE_COLUMNS
from ettweb.rollups.models import (
    AttemptRollup,
    AttemptTimeline,
    AttributionChunk,
    JobRollup,
)
from ettweb.rollups.rebuild import rebuild_all
from ettweb.rollups.refresh import load_events, refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.rank_events import ranked_job

pytestmark = pytest.mark.django_db


def _store(timeline: Timeline) -> None:
    refresh_jobs(ingest_lines(timeline.lines()).jobs)


def _lanes(job: str) -> list[tuple[Any, ...]]:
    """Every stored lane of the job, chunk by chunk: (attempt, ranks, count, bin, runs)."""
    return [(attempt, ranks, count, bin_s, [tuple(r) for r in runs])
            for k, lanes in sorted(
                chunk_store.chunk_lanes(job, chunk_store.chunk_index(job)).items())
            for attempt, _, ranks, count, bin_s, runs in lanes]


def _stored(job: str) -> dict[str, Any]:
    return {
        "timeline": [(t.attempt, t.bin_s, [tuple(p) for p in t.pieces])
                     for t in AttemptTimeline.objects.filter(job_id=job).order_by("attempt")],
        "lanes": _lanes(job),
        "repeated": dict(AttemptRollup.objects.filter(job_id=job)
                         .values_list("attempt", "repeated_steps")),
    }


def _engine(job: str) -> dict[str, Any]:
    """What the whole-job engine draws (the job fits in one chunk, so its lanes too)."""
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
    assert chunk_store.chunk_index("j1") == [1]  # 1000-1113 s: one chunk of 900 s
    assert _stored("j1") == _engine("j1")
    stored = _stored("j1")
    assert stored["repeated"] == {0: 0, 1: 80}  # §3 worked example: attempt 1 redoes 80
    assert stored["timeline"][1][2][0] == ("restart_gap", 1083.0, 1090.0)
    assert [lane[:3] for lane in stored["lanes"]] == [(0, "0", 1), (1, "0", 1)]


def test_a_512_rank_job_whose_ranks_agree_stores_a_handful_of_lanes() -> None:
    job = ranked_job(512, job="wide", jitter_s=0.3, seed=11)
    _store(job)
    lanes = _lanes("wide")
    per_attempt: dict[int, int] = {}
    for lane in lanes:
        per_attempt[lane[0]] = per_attempt.get(lane[0], 0) + 1
    assert set(per_attempt) == {0, 1} and max(per_attempt.values()) <= 4, per_attempt
    assert all(sum(lane[2] for lane in lanes if lane[0] == a) == 512 for a in (0, 1))
    assert [lane[1] for lane in lanes if lane[0] == 0] == ["0-511"]
    assert _stored("wide") == _engine("wide")
    assert LANE_TARGET >= 4


def test_ranks_that_differ_are_stored_as_their_own_lanes() -> None:
    _store(ranked_job(32, job="slow", slow={4, 5, 6, 20}))
    ranks = [(lane[1], lane[2]) for lane in _lanes("slow") if lane[0] == 0]
    assert ranks == [("0-3, 7-19, 21-31", 28), ("4-6, 20", 4)]


def test_a_small_job_is_one_chunk_a_day() -> None:
    """Three hours of a one-rank job: 180 events, one chunk (one read, one row); its
    lanes cover the whole attempt, as the engine's do."""
    _store(_three_hours("small"))
    assert chunk_store.chunk_index("small") == [0]
    assert _stored("small") == _engine("small")


def test_a_large_job_keeps_lanes_per_quarter_hour_and_one_bounded_timeline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``GROUP_EVENTS`` events a chunk is one fine chunk (15 minutes): twelve chunks of
    lanes, each over its own quarter hour; the timeline is one row, the engine's."""
    monkeypatch.setattr(chunk_refresh, "GROUP_EVENTS", 10)
    _store(_three_hours("long"))
    assert chunk_store.chunk_index("long") == list(range(12))
    stored = chunk_store.chunk_lanes("long", range(12))
    for k in range(12):
        lanes = stored[k]
        assert len(lanes) == 1
        runs = lanes[0][5]
        assert runs[0][1] >= k * 900.0 and runs[-1][2] <= (k + 1) * 900.0
    assert _stored("long")["timeline"] == _engine("long")["timeline"]


def _three_hours(job: str) -> Timeline:
    t = Timeline(job)
    t.mark(0, "attempt_start", 0.0, gpus=4)
    t.span(0, "compile", 0.0, 120.0)
    for minute in range(178):
        t.span(0, "train", 120.0 + 60 * minute, 180.0 + 60 * minute,
               steps=(10 * minute, 10 * minute + 10))
    return t


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
    before = list(AttemptTimeline.objects.values_list("pk", flat=True))
    chunk_written = AttributionChunk.objects.get(job="j1").written_at
    digest = JobRollup.objects.get(job="j1").timeline_digest
    refresh_jobs(["j1"])  # nothing new: same digest, same rows, no chunk recomputed
    assert list(AttemptTimeline.objects.values_list("pk", flat=True)) == before
    assert JobRollup.objects.get(job="j1").timeline_digest == digest
    assert AttributionChunk.objects.get(job="j1").written_at == chunk_written
    late = Timeline("j1")
    late.span(1, "eval", 1113, 1120)
    late.mark(1, "attempt_end", 1120, status="completed")
    for number, event in enumerate(late.events):
        event["id"] = f"late-{number}"  # not the worked example's ids: new events
    _store(late)
    after = list(AttemptTimeline.objects.order_by("attempt").values_list("pk", flat=True))
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


def test_the_timeline_rows_are_written_in_the_tables_column_order() -> None:
    assert copy_columns(AttemptTimeline) == list(TIMELINE_COLUMNS)


def test_a_job_with_no_events_left_loses_its_drawing() -> None:
    _store(worked_example())
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ingest_event WHERE job = 'j1'")
    refresh_jobs(["j1"], whole=True)
    assert not AttributionChunk.objects.exists() and not AttemptTimeline.objects.exists()
