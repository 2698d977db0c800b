"""The rollout page's figures are plain figure JSON: each must still be a figure plotly
accepts (``go.Figure`` validates every property and raises on a misspelt one) and draw what
the page promises: both windows shaded, the rollout marked, a zero line under the changes."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import plotly.graph_objects as go
import pytest

from ettweb.queries.impact import (
    AdjustedChange,
    AdjustedEffect,
    ComponentEffect,
    ComponentShift,
    GroupImpact,
    ImpactResult,
    LostShare,
    RolloutInfo,
    TrendDay,
    Windows,
)
from ettweb.rollouts import figures
from ettweb.rollouts.scope import Scope


def _group(change: float | None, ci: tuple[float, float] | None) -> GroupImpact:
    return GroupImpact(jobs_before=6, jobs_after=6, before_ett_pct=70.0,
                       after_ett_pct=None if change is None else 70.0 + change,
                       change_pts=change, change_rel=None, ci95_pts=ci)


def _result(*, control: bool, window_days: int = 3) -> ImpactResult:
    days = [date(2026, 3, d) for d in (7, 8, 9, 11, 12, 13)]
    return ImpactResult(
        rollout=RolloutInfo(id=1, name="cache", component="pt2_compiler",
                            at=datetime(2026, 3, 10, 9, tzinfo=UTC),
                            scope=Scope(teams=("ads",)) if control else Scope(), notes="",
                            link="", simulated=False),
        window_days=window_days,
        windows=Windows(date(2026, 3, 10), (days[0], days[2]), (days[3], days[5]), False),
        treated=_group(4.0, (2.0, 6.0)), control=_group(0.5, (-1.0, 2.0)) if control else None,
        did_pts=3.5 if control else None, did_ci95_pts=(1.0, 6.0) if control else None,
        components={"pt2_compiler": ComponentShift("pt2_compiler", 10.0, 6.0)},
        treated_before_ett=[60.0, 70.0, 80.0], treated_after_ett=[66.0, 75.0, 84.0],
        verdict="improved", verdict_reason="test",
        component_effect=ComponentEffect(
            "pt2_compiler", LostShare(10.0, 6.0, (-5.0, -3.0)),
            LostShare(9.0, 9.1, (-0.5, 0.6)) if control else None,
            -4.1 if control else None, (-5.2, -3.0) if control else None, "reduced", "test",
            None),
        adjusted=AdjustedEffect(
            "size-stratified", AdjustedChange(3.8, (2.9, 4.6)),
            AdjustedChange(0.4, (-0.3, 1.0)) if control else None,
            3.4 if control else None, (2.4, 4.4) if control else None, "improved", "test",
            jobs_used=12, jobs_left_out=0, strata=2, inconclusive=None),
        trend=[TrendDay(d, 70.0 + i, 69.0 if control else None) for i, d in enumerate(days)])


def _validated(figure: dict[str, Any]) -> go.Figure:
    return go.Figure(figure)  # raises ValueError naming any property plotly does not know


@pytest.mark.parametrize("control", [True, False])
def test_every_figure_is_valid_plotly(control: bool) -> None:
    result = _result(control=control)
    for figure in (figures.trend(result), figures.change_intervals(result),
                   figures.distributions(result),
                   figures.component_shifts(result.moved_components())):
        _validated(figure)


def test_trend_shades_both_windows_and_marks_the_rollout() -> None:
    fig = _validated(figures.trend(_result(control=True)))
    assert [t.name for t in fig.data] == ["treated (in scope)", "control (out of scope)"]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1) for r in rects] == [("2026-03-07T00:00:00", "2026-03-10T00:00:00"),
                                             ("2026-03-11T00:00:00", "2026-03-14T00:00:00")]
    line = next(s for s in fig.layout.shapes if s.type == "line")
    assert line.x0 == line.x1 == "2026-03-10T09:00:00" and line.yref == "y domain"
    assert [a.text for a in fig.layout.annotations] == ["before (3 d)", "after (3 d)", "rollout"]
    assert fig.layout.xaxis.dtick == 86_400_000  # 7 days: one tick a day


def test_changes_sit_around_a_zero_line_with_their_intervals() -> None:
    fig = _validated(figures.change_intervals(_result(control=True)))
    trace = fig.data[0]
    assert list(trace.y) == ["pt2_compiler lost share", "ETT% adjusted", "ETT% treated",
                             "ETT% control", "ETT% DiD"]
    # With a control the DiD decides: the component's and the adjusted rows show theirs.
    assert list(trace.x) == [-4.1, 3.4, 4.0, 0.5, 3.5]
    assert list(trace.error_x.array) == pytest.approx([1.1, 1.0, 2.0, 1.5, 2.5])
    assert list(trace.error_x.arrayminus) == pytest.approx([1.1, 1.0, 2.0, 1.5, 2.5])
    # Less lost time is good (green), and so is more ETT%.
    assert list(trace.marker.color) == [figures.GOOD] * 5
    assert fig.layout.shapes[0].x0 == 0
    only_treated = _validated(figures.change_intervals(_result(control=False)))
    assert list(only_treated.data[0].y) == ["pt2_compiler lost share", "ETT% adjusted",
                                            "ETT% treated"]
    assert list(only_treated.data[0].x) == [-4.0, 3.8, 4.0]
