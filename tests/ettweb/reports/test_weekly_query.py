"""The weekly report's numbers (ETT_SPEC §7): an ISO week, and the dashboard's numbers for it.

The fleet is the rollout test's: jobs inside single days of March 2026. Week 2026-W11 is
Monday Mar 9 to Sunday Mar 15; the week before, W10, ends on Sunday Mar 8.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from ettweb.queries import (
    DateRange,
    ImpactQuery,
    IsoWeek,
    LostByComponentQuery,
    TrendQuery,
    WeeklyReportQuery,
    calculate,
)
from ettweb.rollouts.models import Rollout
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

W11 = IsoWeek(2026, 11)


def test_iso_weeks_parse_and_refuse_by_name() -> None:
    assert IsoWeek.parse("2026-W11") == W11 and str(W11) == "2026-W11"
    assert W11.range == DateRange(date(2026, 3, 9), date(2026, 3, 15))
    assert W11.previous == IsoWeek(2026, 10)
    assert IsoWeek(2026, 1).previous == IsoWeek(2025, 52)
    assert IsoWeek(2026, 53).range.date_to == date(2027, 1, 3)  # 2026 has 53 ISO weeks
    for bad, message in (("2026-47", "must look like 2026-W47"), ("2025-W53", "weeks 1 to 52"),
                         ("2026-W00", "weeks 1 to 53"), ("W47", "must look like"),
                         ("9999-W52", "year must be between 1901 and 9998, not 9999"),
                         ("1900-W10", "year must be between 1901 and 9998, not 1900")):
        with pytest.raises(ValueError, match=message):
            IsoWeek.parse(bad)


def test_the_report_covers_the_week_that_ended() -> None:
    monday_morning = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)  # Monday of W48
    assert IsoWeek.last_complete(monday_morning) == IsoWeek(2026, 47)
    sunday_night = datetime(2026, 11, 22, 23, 59, tzinfo=UTC)  # still W47
    assert IsoWeek.last_complete(sunday_night) == IsoWeek(2026, 46)


@pytest.fixture
def fleet(db: None) -> None:
    events: list[dict[str, Any]] = []
    events += day_job("prev-a", 3, 2, "ads", ("compile", 2), 8)            # W10: 20 wall, 16
    events += day_job("prev-b", 8, 1, "feed", ("checkpoint_save", 5), 5)   # W10: 10, 5
    events += day_job("this-a", 9, 2, "ads", ("compile", 1), 9)            # W11: 20, 18
    events += day_job("this-b", 11, 4, "feed", ("checkpoint_save", 1), 9)  # W11: 40, 36
    events += day_job("this-c", 15, 1, "ads", ("compile", 0), 10)          # W11: 10, 10
    events += day_job("next-a", 16, 8, "ads", ("compile", 5), 5)           # W12: not in it
    store(events)


def test_every_number_is_the_dashboards_for_the_same_days(fleet: None) -> None:
    report = calculate(WeeklyReportQuery(W11))
    assert report.this.ett_pct == pytest.approx(100 * 64 / 70)
    assert report.before.ett_pct == pytest.approx(100 * 21 / 30)
    assert report.this.ett_pct == calculate(TrendQuery(W11.range)).ett_pct
    assert report.before.ett_pct == calculate(TrendQuery(W11.previous.range)).ett_pct
    dashboard = calculate(LostByComponentQuery(W11.range))
    assert report.this.lost_by_component_gpu_s == {c.component: c.gpu_s
                                                   for c in dashboard.components}
    assert report.change_pts == pytest.approx(100 * 64 / 70 - 70.0)
    assert report.change_rel == pytest.approx((100 * 64 / 70) / 70.0 - 1)
    assert report.subject == f"ETT% 2026-W11: {100 * 64 / 70:.1f}% ({100 * 64 / 70 - 70:+.1f} pts)"
    assert [j.job for j in report.top_jobs] == ["this-b", "this-a"]  # this-c lost nothing


def test_subscribed_components_come_first(fleet: None) -> None:
    report = calculate(WeeklyReportQuery(W11, components=("evaluation", "pt2_compiler")))
    names = [c.component for c in report.components]
    assert names[:2] == ["evaluation", "pt2_compiler"]
    assert names[2] == "checkpointing"  # then the rest, largest loss first
    compiler = report.components[1]
    assert compiler.subscribed and compiler.lost_gpu_s == pytest.approx(2 * 3600.0)
    assert compiler.previous_lost_gpu_s == pytest.approx(4 * 3600.0)
    assert compiler.change_gpu_s == pytest.approx(-2 * 3600.0)


def test_the_weeks_rollouts_carry_their_impact_so_far(fleet: None) -> None:
    inside = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                    at=datetime(2026, 3, 10, 12, tzinfo=UTC), scope={})
    Rollout.objects.create(name="next week", component="pt2_compiler",
                           at=datetime(2026, 3, 17, tzinfo=UTC), scope={})
    report = calculate(WeeklyReportQuery(W11))
    assert [r.rollout.name for r in report.rollouts] == ["compile cache"]
    impact = calculate(ImpactQuery(inside.pk))
    assert impact is not None
    assert report.rollouts[0].change_pts == impact.treated.change_pts
    assert report.rollouts[0].ci95_pts is None and report.rollouts[0].verdict == "inconclusive"


def test_a_week_without_data_says_so(fleet: None) -> None:
    report = calculate(WeeklyReportQuery(IsoWeek(2026, 30)))
    assert not report.this.has_data and report.this.ett_pct is None
    assert report.change_pts is None and report.top_jobs == []
    assert report.subject == "ETT% 2026-W30: no training data this week"
    first = calculate(WeeklyReportQuery(IsoWeek(2026, 10)))  # nothing the week before
    assert first.subject == "ETT% 2026-W10: 70.0%"


def test_the_chart_history_is_the_weekly_trend_of_the_last_eight_weeks(fleet: None) -> None:
    """The e-mail's picture: eight weeks ending with the report's, gaps where no data."""
    Rollout.objects.create(name="old", component="pt2_compiler",
                           at=datetime(2026, 1, 5, tzinfo=UTC), scope={})  # before W04
    shown = Rollout.objects.create(name="shown", component="pt2_compiler",
                                   at=datetime(2026, 3, 4, 8, tzinfo=UTC), scope={})  # W10
    report = calculate(WeeklyReportQuery(W11))
    assert [str(h.week) for h in report.history] == [f"2026-W{w:02d}" for w in range(4, 12)]
    weekly = {p.period: p.ett_pct for p in calculate(TrendQuery(
        DateRange(date(2026, 1, 19), date(2026, 3, 15)), "week")).points}
    assert report.history[-1].ett_pct == weekly[date(2026, 3, 9)] == pytest.approx(
        100 * 64 / 70)
    assert report.history[-2].ett_pct == pytest.approx(70.0)
    assert all(h.ett_pct is None for h in report.history[:-2])
    assert [m.id for m in report.history_markers] == [shown.pk]
    assert report.as_api()["history"][-1] == {"week": "2026-W11",
                                              "ett_pct": report.history[-1].ett_pct}


def test_history_length_is_checked() -> None:
    with pytest.raises(ValueError, match="history_weeks must be between 2 and 52, not 1"):
        WeeklyReportQuery(W11, history_weeks=1)
