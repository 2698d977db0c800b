"""ETT_SPEC §3 rule 3 through Postgres: implied train spans in the stored refresh (issue 41).

The hand-computed hard kill gives its hand-computed rows; hard-killed jobs arriving in
shuffled batches (a heartbeat before the slice it sits in, a late span cancelling an implied
one, a late heartbeat reaching back chunks) refresh after every batch to the engine's
numbers; a whole rebuild gives the same rows; a backwards heartbeat is an anomaly.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.test import override_settings

from collector.schema import dump_event, validate_event
from ettweb.attribution import chunk_refresh
from ettweb.attribution.chunk_sums import day_values
from ettweb.attribution.engine import Event, attribute_job
from ettweb.attribution.implied import BACKWARDS
from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.models import DailyCategoryRollup, JobRollup, RankProgress
from ettweb.rollups.refresh import load_events, refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, hard_kill_example

EPOCH = 1_772_323_200.0  # 2026-03-01 00:00 UTC


def _moved(timeline: Timeline, by: float) -> list[str]:
    lines = []
    for event in timeline.events:
        raw = dict(event)
        for key in ("start", "end", "ts"):
            if key in raw:
                raw[key] += by
        lines.append(dump_event(validate_event(raw)))
    return lines


@pytest.mark.django_db
def test_the_hand_computed_hard_kill_through_postgres() -> None:
    lines = _moved(hard_kill_example(), EPOCH)
    refresh_jobs(ingest_lines(lines).jobs)
    row = JobRollup.objects.get(job="hard-kill")
    assert (row.wall_s, row.productive_s, row.wall_gpu_s, row.productive_gpu_s) == (
        pytest.approx(123.0), pytest.approx(80.0), pytest.approx(492.0), pytest.approx(320.0))
    assert (row.repeated_steps, row.failures, row.time_to_start_s) == (80, 2, 0.0)
    assert row.lost_s == pytest.approx({"checkpoint_save": 2.0, "checkpoint_load": 6.0,
                                        "restart_gap": 20.0, "unattributed": 7.0,
                                        "repeated_training": 8.0})
    assert row.events == len(lines)  # the implied span is not an event
    progress = RankProgress.objects.get(job="hard-kill", attempt=0, rank=0)
    assert (progress.beat_step, progress.start, progress.step_start) == (
        680, EPOCH + 1062, 600)


def _hard_killed_job(rng: random.Random, job: str) -> list[Event]:
    """Attempts training in slices on one or two ranks, saving now and then, heartbeating
    with their step (now and then backwards) and killed outright; each resumes from its
    last save."""
    t = EPOCH + 86400.0 - rng.choice([0.0, 40.0])
    raw: list[dict[str, Any]] = []
    saved = 0
    for attempt in range(rng.randint(1, 3)):
        ranks = rng.randint(1, 2)
        raw.append({"kind": "mark", "mark": "attempt_start", "ts": t, "attempt": attempt,
                    "attrs": {"gpus": ranks}})
        step = saved
        for _ in range(rng.randint(0, 3)):
            length = rng.choice([2.5, 7.0, 30.0])
            for rank in range(ranks):
                raw.append({"kind": "span", "phase": "train", "start": t, "end": t + length,
                            "rank": rank, "attempt": attempt, "step_start": step,
                            "step_end": step + 10})
            t, step = t + length, step + 10
            if rng.random() < 0.5:
                raw.append({"kind": "span", "phase": "checkpoint_save", "start": t,
                            "end": t + 1.5, "attempt": attempt})
                t, saved = t + 1.5, step
        for rank in range(ranks):
            for beat in range(rng.randint(0, 2)):
                raw.append({"kind": "mark", "mark": "heartbeat", "attempt": attempt,
                            "rank": rank, "ts": t + 2.0 * (beat + 1) + rank,
                            "step": max(0, step + rng.randint(-3, 8))})
        t += 6.0 + rng.choice([0.0, 4.0, 50.0])
    return [validate_event({"v": 1, "id": f"{job}-{i}", "job": job, **e})
            for i, e in enumerate(raw)]


def _assert_rows_are_the_engines() -> None:
    for job, events in load_events(sorted(JobRollup.objects.values_list("job",
                                                                         flat=True))).items():
        whole = attribute_job(events)
        row = JobRollup.objects.get(job=job)
        assert (row.wall_gpu_s, row.productive_gpu_s) == (
            pytest.approx(whole.wall_gpu_s, rel=1e-9),
            pytest.approx(whole.productive_gpu_s, rel=1e-9)), job
        assert row.lost_gpu_s == pytest.approx(whole.lost_gpu_s, rel=1e-9), job
        assert (row.repeated_steps, row.failures, row.anomalies) == (
            whole.repeated_steps, whole.failures, whole.anomalies), job
        stored = {(d, c): (sec, g) for d, c, sec, g in DailyCategoryRollup.objects.filter(
            job_id=job).values_list("day", "category", "seconds", "gpu_seconds")}
        wanted = day_values(whole)
        assert set(stored) == set(wanted), job
        assert all(stored[key] == pytest.approx(value, rel=1e-9, abs=1e-9)
                   for key, value in wanted.items()), job


@pytest.mark.django_db
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@override_settings(ETT_CHUNK_S=5)
def test_hard_kills_in_shuffled_batches_refresh_to_the_engines_numbers(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_refresh, "GROUP_EVENTS", 3)
    rng = random.Random(seed)
    events = [e for n in range(6) for e in _hard_killed_job(rng, f"job-{seed}-{n}")]
    lines = [dump_event(e) for e in events]
    rng.shuffle(lines)
    at = 0
    while at < len(lines):
        size = rng.randint(1, 6)
        refresh_jobs(ingest_lines(lines[at:at + size]).jobs)
        at += size
        _assert_rows_are_the_engines()
    assert RankProgress.objects.exclude(start=None).exists()
    before = {r.job: (r.productive_gpu_s, r.repeated_steps) for r in JobRollup.objects.all()}
    refresh_jobs(list(before), whole=True)
    _assert_rows_are_the_engines()
    for row in JobRollup.objects.all():
        assert (row.productive_gpu_s, row.repeated_steps) == (
            pytest.approx(before[row.job][0], rel=1e-9), before[row.job][1])


@pytest.mark.django_db
def test_a_backwards_heartbeat_is_kept_and_counted() -> None:
    t = Timeline("back")
    t.train(0, 0, 60, (0, 600))
    t.beat(0, 70, 680)
    t.beat(0, 80, 650)
    t.mark(1, "attempt_start", 90)
    refresh_jobs(ingest_lines(_moved(t, EPOCH)).jobs)
    row = JobRollup.objects.get(job="back")
    assert row.anomalies == {BACKWARDS: 1}
    assert row.productive_s == pytest.approx(60.0)
    assert row.events == 4


@pytest.mark.django_db
@pytest.mark.parametrize("longest_known", [True, False])
def test_a_heartbeat_days_after_the_last_span_still_finds_it(longest_known: bool) -> None:
    """The first look reaches back twice the longest span and an hour; a rank whose last
    span is two days older is looked up again from the job's first event (and so is a job
    stored before its longest span was kept)."""
    from ettweb.ingest.models import Job

    t = Timeline("quiet")
    t.train(0, 0, 60, (0, 600))
    t.span(0, "eval", 60, 90)
    refresh_jobs(ingest_lines(_moved(t, EPOCH)).jobs)
    if not longest_known:
        Job.objects.filter(job_id="quiet").update(longest_span_s=None)
    late = Timeline("quiet")
    late.beat(0, 2 * 86400.0, 700)
    late.events[0]["id"] = "late-beat"
    refresh_jobs(ingest_lines(_moved(late, EPOCH)).jobs)
    progress = RankProgress.objects.get(job="quiet")
    assert (progress.start, progress.step_start, progress.beat_step) == (EPOCH + 90, 600, 700)
    row = JobRollup.objects.get(job="quiet")
    assert row.productive_s == pytest.approx(60 + 2 * 86400.0 - 90)
    assert Job.objects.get(job_id="quiet").longest_span_s == (60.0 if longest_known else None)
