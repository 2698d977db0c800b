"""Query runners over rollups: ranges, day/week, grouping, GPU buckets, components, lifecycle.

The fleet below is small enough to compute by hand (GPU-hours, 2026-03-01 is a Sunday):

* ``a`` 1 GPU, team ads, model m1, cluster east: compile 00:00-01:00 Mar 1, train 01:00 Mar 1
  -> 12:00 Mar 2, completed.  Mar 1: wall 24, productive 23.  Mar 2: wall 12, productive 12.
* ``b`` 16 GPUs, team feed, model m2, cluster west, all on Mar 2: attempt 0 checkpoint_load
  00-01, train 01-04 steps 0-300, fails at 04:00; restart gap 04-05; attempt 1 trains
  05-08 steps 0-300 (all repeated), 08-10 steps 300-500, completed.
  Wall 10 h x 16 = 160; productive (3 + 2) x 16 = 80; load 16, gap 16, repeated 48.
  Recovery: 04:00 -> 08:00 = 4 h (gap 1 h + repeated 3 h).
* ``c`` 100 GPUs, team ads, no model, cluster east: trains 00:00-02:00 Mar 3, still running.
  Wall 200, productive 200.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import (
    DateRange,
    LifecycleQuery,
    LostByComponentQuery,
    TopJobsQuery,
    TrendQuery,
    calculate,
    gpu_bucket,
)
from ettweb.queries.trend import TrendPoint, TrendResult
from ettweb.rollups.models import DailyCategoryRollup, JobRollup, PhaseComponent
from tests.conftest import mark, span

pytestmark = pytest.mark.django_db

H = 3600.0
MAR1 = 1772323200.0  # 2026-03-01T00:00:00Z
MAR2, MAR3 = MAR1 + 24 * H, MAR1 + 48 * H
WHOLE = DateRange(date(2026, 2, 1), date(2026, 3, 31))


def _fleet() -> list[dict[str, Any]]:
    meta_a = {"gpus": 1, "team": "ads", "model": "m1", "cluster": "east"}
    meta_b = {"gpus": 16, "team": "feed", "model": "m2", "cluster": "west"}
    return [
        mark("a", 0, "attempt_start", MAR1, attrs=meta_a),
        span("a", 0, "compile", MAR1, MAR1 + H),
        span("a", 0, "train", MAR1 + H, MAR2 + 12 * H, step_start=0, step_end=3500),
        mark("a", 0, "attempt_end", MAR2 + 12 * H, attrs={"status": "completed"}),
        mark("b", 0, "attempt_start", MAR2, attrs=meta_b),
        span("b", 0, "checkpoint_load", MAR2, MAR2 + H),
        span("b", 0, "train", MAR2 + H, MAR2 + 4 * H, step_start=0, step_end=300),
        mark("b", 0, "attempt_end", MAR2 + 4 * H, attrs={"status": "failed"}),
        mark("b", 1, "attempt_start", MAR2 + 5 * H),
        span("b", 1, "train", MAR2 + 5 * H, MAR2 + 8 * H, step_start=0, step_end=300),
        span("b", 1, "train", MAR2 + 8 * H, MAR2 + 10 * H, step_start=300, step_end=500),
        mark("b", 1, "attempt_end", MAR2 + 10 * H, attrs={"status": "completed"}),
        mark("c", 0, "attempt_start", MAR3, attrs={"gpus": 100, "team": "ads",
                                                  "cluster": "east"}),
        span("c", 0, "train", MAR3, MAR3 + 2 * H, step_start=0, step_end=10),
    ]


@pytest.fixture(autouse=True)
def fleet() -> None:
    lines = [json.dumps({"v": 1, "id": f"q{i}", **event}) for i, event in enumerate(_fleet())]
    ingest_batch(lines)


def _gpu_h(points: list[Any]) -> list[tuple[date, str, float, float]]:
    return [(p.period, p.group, round(p.wall_gpu_s / H, 6), round(p.productive_gpu_s / H, 6))
            for p in points]


def test_daily_fleet_trend_is_gpu_weighted() -> None:
    result = calculate(TrendQuery(WHOLE))
    assert _gpu_h(result.points) == [
        (date(2026, 3, 1), "all", 24.0, 23.0),
        (date(2026, 3, 2), "all", 172.0, 92.0),   # a 12/12 + b 160/80
        (date(2026, 3, 3), "all", 200.0, 200.0),
    ]
    assert result.points[1].ett_pct == pytest.approx(100 * 92 / 172)
    assert result.ett_pct == pytest.approx(100 * 315 / 396)


def test_weekly_trend_starts_weeks_on_monday() -> None:
    result = calculate(TrendQuery(WHOLE, interval="week"))
    assert _gpu_h(result.points) == [
        (date(2026, 2, 23), "all", 24.0, 23.0),  # Sunday Mar 1 belongs to Feb 23's week
        (date(2026, 3, 2), "all", 372.0, 292.0),
    ]


def test_range_keeps_only_its_days() -> None:
    result = calculate(TrendQuery(DateRange(date(2026, 3, 2), date(2026, 3, 2))))
    assert _gpu_h(result.points) == [(date(2026, 3, 2), "all", 172.0, 92.0)]


@pytest.mark.parametrize(("group_by", "expected"), [
    ("team", {"ads": (236.0, 235.0), "feed": (160.0, 80.0)}),
    ("model", {"m1": (36.0, 35.0), "m2": (160.0, 80.0), "(none)": (200.0, 200.0)}),
    ("cluster", {"east": (236.0, 235.0), "west": (160.0, 80.0)}),
    ("gpus", {"1": (36.0, 35.0), "9-64": (160.0, 80.0), "65-512": (200.0, 200.0)}),
])
def test_grouping(group_by: str, expected: dict[str, tuple[float, float]]) -> None:
    result = calculate(TrendQuery(WHOLE, interval="week", group_by=group_by))  # type: ignore[arg-type]
    totals: dict[str, list[float]] = {}
    for _period, group, wall, productive in _gpu_h(result.points):
        bucket = totals.setdefault(group, [0.0, 0.0])
        bucket[0] += wall
        bucket[1] += productive
    assert {g: tuple(v) for g, v in totals.items()} == expected
    # GPU-size buckets in size order ("9-64" before "65-512"), other groups by name.
    assert result.groups == (list(expected) if group_by == "gpus" else sorted(expected))


def test_gpu_buckets() -> None:
    assert [gpu_bucket(n) for n in (1, 2, 8, 9, 64, 65, 512, 513, 4096)] == [
        "1", "2-8", "2-8", "9-64", "9-64", "65-512", "65-512", "513+", "513+"]


def test_lost_by_component_maps_categories_at_query_time() -> None:
    result = calculate(LostByComponentQuery(WHOLE))
    assert [(c.component, round(c.gpu_hours, 6)) for c in result.components] == [
        ("reliability", 48.0), ("checkpointing", 16.0), ("scheduler", 16.0),
        ("pt2_compiler", 1.0)]
    assert result.lost_gpu_hours == pytest.approx(81.0)
    written = set(DailyCategoryRollup.objects.values_list("written_at", flat=True))

    PhaseComponent.objects.filter(phase="restart_gap").update(component="cluster_runtime")
    PhaseComponent.objects.filter(phase="checkpoint_load").update(component="storage")

    edited = calculate(LostByComponentQuery(WHOLE))
    assert {c.component: round(c.gpu_hours, 6) for c in edited.components} == {
        "reliability": 48.0, "storage": 16.0, "cluster_runtime": 16.0, "pt2_compiler": 1.0}
    # Nothing was recomputed: the rollups still hold the same rows, by category.
    assert set(DailyCategoryRollup.objects.values_list("written_at", flat=True)) == written
    assert not DailyCategoryRollup.objects.filter(category="cluster_runtime").exists()


def test_top_jobs_by_lost_gpu_hours() -> None:
    result = calculate(TopJobsQuery(WHOLE, limit=5))
    assert [(j.job, round(j.lost_gpu_hours, 6)) for j in result.jobs] == [("b", 80.0),
                                                                          ("a", 1.0)]
    b = result.jobs[0]
    assert (b.gpus, b.status, b.team, b.model, b.cluster) == (16, "completed", "feed", "m2",
                                                               "west")
    assert b.ett_pct == pytest.approx(50.0)
    only_mar1 = calculate(TopJobsQuery(DateRange(date(2026, 3, 1), date(2026, 3, 1))))
    assert [j.job for j in only_mar1.jobs] == ["a"]


def test_lifecycle_time_to_start_recover_and_failures_per_day() -> None:
    result = calculate(LifecycleQuery(WHOLE))
    by_day = {p.period: p for p in result.points}
    assert sorted(by_day) == [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)]
    assert by_day[date(2026, 3, 1)].mean_time_to_start_s == H  # a: compile first
    assert by_day[date(2026, 3, 3)].mean_time_to_start_s == 0.0
    mar2 = by_day[date(2026, 3, 2)]
    assert (mar2.failures, mar2.recoveries, mar2.mean_time_to_recover_s) == (1, 1, 4 * H)
    assert mar2.restart_tax_gpu_s == pytest.approx({"restart_gap": 16 * H,
                                                    "repeated_training": 48 * H})
    assert mar2.restart_tax_gpu_hours == pytest.approx(64.0)
    assert (result.failures, result.recoveries) == (1, 1)
    assert result.categories == ["repeated_training", "restart_gap"]
    untaxed = calculate(LifecycleQuery(WHOLE, with_restart_tax=False))
    assert (untaxed.failures, untaxed.recoveries, untaxed.categories) == (1, 1, [])
    assert untaxed.mean_time_to_recover_s == result.mean_time_to_recover_s == 4 * H
    weekly = calculate(LifecycleQuery(WHOLE, interval="week"))
    assert [(p.period, p.jobs_started) for p in weekly.points] == [
        (date(2026, 2, 23), 1), (date(2026, 3, 2), 2)]


def test_job_rollups_hold_the_job_list_numbers() -> None:
    assert {r.job: (r.status, r.gpus) for r in JobRollup.objects.all()} == {
        "a": ("completed", 1), "b": ("completed", 16), "c": ("running", 100)}


@pytest.mark.parametrize(("build", "reason"), [
    (lambda: DateRange(date(2026, 3, 2), date(2026, 3, 1)), "date_from 2026-03-02 is after"),
    (lambda: DateRange(date(2020, 1, 1), date(2026, 1, 1)), "range longer than"),
    (lambda: TrendQuery(WHOLE, interval="month"), "interval must be one of day, week"),  # type: ignore[arg-type]
    (lambda: TrendQuery(WHOLE, group_by="user"), "group_by must be one of"),  # type: ignore[arg-type]
    (lambda: TopJobsQuery(WHOLE, limit=0), "limit must be between 1 and 1000"),
])
def test_bad_query_inputs_are_rejected_with_a_reason(build: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        build()


def test_many_groups_fold_into_the_largest_and_one_other_line() -> None:
    """group_by=model over nine models drew nine overlapping lines: six are drawn, the
    rest are one line whose ETT% is their own GPU-weighted sum."""
    day = date(2026, 3, 2)
    points = [TrendPoint(day, f"m{n}", wall_gpu_s=100.0 * (n + 1), productive_gpu_s=50.0 * n)
              for n in range(9)]
    trend = TrendResult(points, [f"m{n}" for n in range(9)], 0.0, 0.0)
    series = trend.folded(6)
    assert list(series) == ["m3", "m4", "m5", "m6", "m7", "m8", "other (3 groups)"]
    other = series["other (3 groups)"][0]
    assert (other.wall_gpu_s, other.productive_gpu_s) == (600.0, 150.0)
    assert other.ett_pct == pytest.approx(25.0)
    assert list(TrendResult(points[:7], [f"m{n}" for n in range(7)], 0, 0).folded(6)) == [
        f"m{n}" for n in range(7)]  # one more than kept: nothing to fold


def test_a_recovery_lists_its_parts_largest_first_and_none_empty() -> None:
    from ettweb.queries.job_detail import RecoveryRow

    row = RecoveryRow(1, 30.0, {"restart_gap": 5.0, "compile": 20.0, "failure": 0.0,
                                "checkpoint_load": 5.0})
    assert row.parts == [("compile", 20.0), ("checkpoint_load", 5.0), ("restart_gap", 5.0)]
