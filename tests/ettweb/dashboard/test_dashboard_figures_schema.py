"""The dashboard's figures are plain figure JSON (a hot path: plotly's objects took 130 ms of
a 180-day fleet page's 880 ms under cProfile). Each must still be a figure plotly accepts
(``go.Figure`` validates every property and raises on a misspelt one), already in the form
plotly would write (the page renders the JSON unvalidated), and draw what the page promises."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import plotly.graph_objects as go
import pytest

from ettweb.attribution.engine import Segment
from ettweb.dashboard import job_page_figures
from ettweb.dashboard.job_page_figures import category_timeline
from ettweb.pages import figures, fleet_figures, time_axis, trend_figures
from ettweb.queries.base import DateRange
from ettweb.queries.job_detail import TimelineRow
from ettweb.queries.markers import RolloutMarker

DAYS = [date(2026, 3, d) for d in (2, 3, 4)]
WEEKS = [date(2026, 3, 2), date(2026, 3, 9)]


def _marker(i: int, at: datetime, component: str = "checkpointing") -> RolloutMarker:
    return RolloutMarker(id=i, name=f"rollout {i}", component=component, at=at,
                         scope="whole fleet", link="")


MARKERS = [_marker(1, datetime(2026, 3, 3, 9, tzinfo=UTC)),
           _marker(2, datetime(2026, 3, 3, 10, tzinfo=UTC)),
           _marker(3, datetime(2026, 3, 4, 12, tzinfo=UTC), "pt2_compiler")]
PREVIOUS = trend_figures.PreviousPeriod(
    {"all": [(d - timedelta(days=3), 60.0) for d in DAYS]}, date(2026, 2, 27), date(2026, 3, 1),
    trend_figures.overlay_shift(3, "day"))
SEGMENTS = [Segment(0.0, 60.0, 0, 1, {"productive": 50.0, "failure": 10.0}),
            Segment(60.0, 90.0, 1, 1, {"restart_gap": 30.0})]

BUILDERS: dict[str, Callable[[], figures.Figure]] = {
    "fleet_lost_stacked": lambda: fleet_figures.fleet_lost_stacked(
        ["j1", "j2"], [{"checkpointing": 5.0}, {"pt2_compiler": 3.0}],
        ["checkpointing", "pt2_compiler"]),
    "phase_timeline": lambda: job_page_figures.phase_timeline(SEGMENTS, 0.0),
    "category_timeline": lambda: category_timeline(
        [TimelineRow(0, (("productive", 0.0, 50.0),), 0.0)], 0.0),
    "ett_trend": lambda: trend_figures.ett_trend({"all": [(d, 80.0) for d in DAYS]}, "day",
                                                 MARKERS, PREVIOUS, {"team": "ads"}),
    "ett_trend_week": lambda: trend_figures.ett_trend(
        {"all": [(w, 80.0) for w in WEEKS]}, "week",
        days=DateRange(WEEKS[0] + timedelta(days=2), WEEKS[-1] + timedelta(days=3)),
        reference=80.0),
    "component_lost_chart": lambda: trend_figures.component_lost_chart(
        [(d, 1.0) for d in DAYS], "checkpointing", "day", MARKERS),
    "component_share_chart": lambda: trend_figures.component_share_chart(
        [(w, 2.0) for w in WEEKS], "checkpointing", "week", MARKERS),
    "lost_gpu_hours_bar": lambda: fleet_figures.lost_gpu_hours_bar({"a": 1.0, "b": 2.0}),
    "lost_share_lines": lambda: fleet_figures.lost_share_lines(
        DAYS, {"checkpointing": [1.0, 2.0, 3.0], "pt2_compiler": [0.5, 0.4, 0.3]}, "day"),
    "lost_over_time_stacked": lambda: fleet_figures.lost_over_time_stacked(
        DAYS, {"checkpointing": [1.0, 2.0, 3.0]}),
    "restart_tax_stacked": lambda: fleet_figures.restart_tax_stacked(
        WEEKS, [{"checkpoint_load": 1.0}, {}], ["checkpoint_load"], "week"),
    "lifecycle_chart": lambda: fleet_figures.lifecycle_chart(DAYS, [60.0, None, 90.0],
                                                             [None, 120.0, None], [1, 0, 3]),
    "lifecycle_chart_empty": lambda: fleet_figures.lifecycle_chart([], [], [], []),
}


def _validated(figure: figures.Figure) -> go.Figure:
    return go.Figure(figure)  # raises ValueError naming any property plotly does not know


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_figure_is_plain_json_plotly_accepts_unchanged(name: str) -> None:
    built = BUILDERS[name]()
    assert isinstance(built, dict) and set(built) == {"data", "layout"}
    plain = json.loads(json.dumps(built))  # plain JSON: no plotly object anywhere inside
    validated = json.loads(_validated(built).to_json())
    validated["layout"].pop("template")  # plotly's default; to_fragment sets ours
    assert validated == plain  # nothing coerced: the page draws what plotly would


def test_fleet_charts_name_their_traces_and_axes() -> None:
    stacked = _validated(BUILDERS["fleet_lost_stacked"]())
    assert [t.name for t in stacked.data] == ["checkpointing", "pt2_compiler"]
    assert stacked.layout.barmode == "stack"
    assert stacked.layout.yaxis.title.text == "lost time (seconds)"
    assert stacked.layout.legend.title.text == "component"


def test_period_charts_draw_whole_days_and_weeks() -> None:
    lost = _validated(BUILDERS["lost_over_time_stacked"]())
    assert lost.layout.xaxis.type == "date" and lost.layout.xaxis.dtick == time_axis.DAY_MS
    assert (lost.data[0].xperiod, lost.data[0].width) == (time_axis.DAY_MS,
                                                          0.8 * time_axis.DAY_MS)
    tax = _validated(BUILDERS["restart_tax_stacked"]())
    assert (tax.data[0].xperiod0, tax.layout.xaxis.tick0) == (time_axis.MONDAY, time_axis.MONDAY)
    life = _validated(BUILDERS["lifecycle_chart"]())
    assert [t.name for t in life.data] == ["failures", "time to start", "time to recover"]
    assert life.data[0].yaxis == "y2" and life.data[0].width == 0.8 * time_axis.DAY_MS
    assert life.data[1].xperiod == time_axis.DAY_MS  # lines too sit mid-period
    assert (life.layout.yaxis2.overlaying, life.layout.yaxis2.tickformat) == ("y", ",d")
    assert life.layout.xaxis.range is not None
    empty = _validated(BUILDERS["lifecycle_chart_empty"]())
    assert empty.layout.xaxis.range is None and empty.layout.xaxis.type == "date"


def test_trend_draws_previous_period_and_marker_lanes_above_the_plot() -> None:
    fig = _validated(BUILDERS["ett_trend"]())
    assert [t.name for t in fig.data] == ["all", "previous period", "rollouts · checkpointing",
                                          "rollouts · pt2_compiler"]
    assert fig.data[1].line.dash == "dash" and fig.data[1].x[0] == "2026-03-02"
    lanes = [t for t in fig.data if t.meta == "rollouts"]
    assert [list(t.text) for t in lanes] == [["2"], [""]]  # two close rollouts: one cluster
    assert all(t.xperiod is None for t in lanes)  # drawn at their own moment
    assert lanes[0].customdata[0].startswith("/rollouts/?component=checkpointing")
    assert "team=ads" in lanes[0].customdata[0]
    assert fig.layout.yaxis.domain[1] < fig.layout.yaxis2.domain[0]
    assert list(fig.layout.yaxis2.ticktext) == ["checkpointing", "pt2_compiler"]
    assert fig.layout.height > 340  # grown by the lanes
    assert {s.type for s in fig.layout.shapes} == {"line", "rect"}
    assert fig.layout.yaxis.title.text == "ETT%"
    assert 0 < fig.layout.yaxis.range[0] < 80 < fig.layout.yaxis.range[1] < 100  # fitted
    menu = fig.layout.updatemenus[0]
    assert [b.label for b in menu.buttons] == ["fit to data", "0-100%"]
    assert menu.buttons[1].args[0] == {"yaxis.range": [0, 100]}


def test_timeline_lists_attempts_top_down_with_the_legend_under_it() -> None:
    fig = _validated(BUILDERS["phase_timeline"]())
    assert [t.name for t in fig.data] == ["productive", "failure", "restart_gap"]
    assert list(fig.layout.yaxis.categoryarray) == ["attempt 1", "attempt 0"]
    assert fig.layout.legend.orientation == "h" and fig.layout.barmode == "overlay"
    assert fig.layout.margin.b > figures.MARGIN["b"]


def test_component_charts_have_one_series_and_no_legend() -> None:
    lost = _validated(BUILDERS["component_lost_chart"]())
    assert lost.data[0].name == "lost GPU-hours" and lost.layout.showlegend is False
    assert lost.layout.yaxis.rangemode == "tozero"
    share = _validated(BUILDERS["component_share_chart"]())
    assert share.data[0].type == "scatter" and share.layout.xaxis.title.text == "week (UTC)"


def test_to_fragment_embeds_the_plain_figure_with_the_page_template() -> None:
    built: dict[str, Any] = BUILDERS["lost_gpu_hours_bar"]()
    html = figures.to_fragment(built, "fleet-lost")
    assert 'data-target="fleet-lost"' in html and f"height:{built['layout']['height']}px" in html
    assert '"template"' in html and "template" not in built["layout"]


def test_the_trend_axis_fits_the_data_around_the_ranges_band() -> None:
    """90% to 96% is a line that moves, not a flat line at the top of 0-100."""
    days = [date(2026, 3, d) for d in (2, 3, 4)]
    fig = _validated(trend_figures.ett_trend({"all": list(zip(days, [90.0, 93.0, 96.0],
                                                                  strict=True))},
                                             "day", reference=93.0))
    low, high = fig.layout.yaxis.range
    assert 88.5 <= low < 90 and 96 < high <= 97.5
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(b.y0, b.y1) for b in band] == [(92.0, 94.0)]
    assert fig.layout.annotations[0].text == "whole range 93.00% ± 1 pt"


def test_a_period_without_data_is_a_gap_not_a_straight_line() -> None:
    points = [(date(2026, 3, 2), 80.0), (date(2026, 3, 23), 90.0), (date(2026, 3, 30), 91.0)]
    fig = _validated(trend_figures.ett_trend({"9-64": points}, "week"))
    assert list(fig.data[0].y) == [80.0, None, 90.0, 91.0]
    assert fig.data[0].connectgaps is False


def test_partial_weeks_are_marked_and_the_axis_outside_the_range_shaded() -> None:
    weeks = [date(2026, 3, 2), date(2026, 3, 9), date(2026, 3, 16)]  # Mondays
    days = DateRange(date(2026, 3, 5), date(2026, 3, 17))  # Thu .. the next Tuesday
    fig = _validated(trend_figures.ett_trend({"all": [(w, 80.0) for w in weeks]}, "week",
                                             days=days))
    assert list(fig.data[0].marker.symbol) == ["circle-open", "circle", "circle-open"]
    assert fig.data[0].customdata[0] == "week of 2026-03-02 (partial: 4 of 7 days in the range)"
    assert fig.data[0].customdata[2] == "week of 2026-03-16 (partial: 2 of 7 days in the range)"
    shaded = [s for s in fig.layout.shapes if s.type == "rect" and s.yref == "paper"]
    assert [s.x1 for s in shaded][:1] == ["2026-03-05 00:00:00"]
    assert shaded[1].x0 == "2026-03-18 00:00:00"


def test_a_components_weekly_share_breaks_at_gaps_and_marks_partial_weeks() -> None:
    weeks = [date(2026, 3, 2), date(2026, 3, 23)]
    days = DateRange(date(2026, 3, 4), date(2026, 3, 29))
    fig = _validated(trend_figures.component_share_chart(
        [(w, 1.5) for w in weeks], "checkpointing", "week", days=days))
    assert list(fig.data[0].y) == [1.5, None, 1.5]
    assert list(fig.data[0].marker.symbol) == ["circle-open", "circle", "circle"]
    lost = _validated(trend_figures.component_lost_chart(
        [(w, 2.0) for w in weeks], "checkpointing", "week", days=days))
    assert any(s.yref == "paper" and s.type == "rect" for s in lost.layout.shapes)
