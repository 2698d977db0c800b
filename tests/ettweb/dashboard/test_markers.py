"""Rollout markers on time charts: clustering (a pure function), lanes, hover text, links,
and the markers query."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ettweb.pages import rollout_lanes, time_axis, trend_figures
from ettweb.pages.rollout_lanes import (
    CLUSTER_NAMES_SHOWN,
    MAX_MARKERS_PER_LANE,
    MarkerCluster,
    cluster_markers,
    marker_hover,
)
from ettweb.platform.text import http_link
from ettweb.queries import DateRange, RolloutMarker, RolloutMarkersQuery, calculate
from ettweb.queries.markers import INVALID_SCOPE
from ettweb.rollouts.models import Rollout
from tests.examples import examples

MAR1 = datetime(2026, 3, 1, tzinfo=UTC)
MONTH_S = 31 * 86400.0


def _marker(i: int, at: datetime, component: str = "checkpointing", name: str | None = None,
            scope: str = "whole fleet", link: str = "") -> RolloutMarker:
    return RolloutMarker(id=i, name=name or f"rollout {i}", component=component, at=at,
                         scope=scope, link=link)


def _ids(lanes: dict[str, list[MarkerCluster]]) -> list[int]:
    return sorted(m.id for lane in lanes.values() for c in lane for m in c.markers)


# --------------------------------------------------------------------------- clustering

def test_fifty_rollouts_in_a_month_stay_readable() -> None:
    rng = random.Random(7)
    markers = [_marker(i, MAR1 + timedelta(seconds=rng.uniform(0, MONTH_S)))
               for i in range(50)]
    lanes = cluster_markers(markers, MONTH_S)
    assert list(lanes) == ["checkpointing"]
    assert len(lanes["checkpointing"]) <= MAX_MARKERS_PER_LANE
    assert _ids(lanes) == list(range(50))  # every rollout counted exactly once
    assert sum(c.count for c in lanes["checkpointing"]) == 50
    threshold = MONTH_S / MAX_MARKERS_PER_LANE
    for cluster in lanes["checkpointing"]:
        assert (cluster.last - cluster.first).total_seconds() <= threshold
        assert cluster.first <= cluster.at <= cluster.last


def test_all_fifty_on_one_day_are_one_cluster() -> None:
    markers = [_marker(i, MAR1 + timedelta(minutes=i)) for i in range(50)]
    (cluster,) = cluster_markers(markers, MONTH_S)["checkpointing"]
    assert cluster.count == 50


def test_far_apart_rollouts_stay_single() -> None:
    markers = [_marker(i, MAR1 + timedelta(days=10 * i)) for i in range(3)]
    lanes = cluster_markers(markers, MONTH_S)
    assert [c.count for c in lanes["checkpointing"]] == [1, 1, 1]


def test_one_lane_per_component_sorted_by_name() -> None:
    markers = [_marker(1, MAR1, "pt2_compiler"), _marker(2, MAR1, "checkpointing"),
               _marker(3, MAR1 + timedelta(days=1), "pt2_compiler"),
               _marker(4, MAR1, "reliability")]
    lanes = cluster_markers(markers, MONTH_S)
    assert list(lanes) == ["checkpointing", "pt2_compiler", "reliability"]
    for component, lane in lanes.items():
        assert {m.component for c in lane for m in c.markers} == {component}
    # Same moment, different components: never merged across lanes.
    assert [c.count for c in lanes["checkpointing"]] == [1]


@settings(max_examples=examples(60), deadline=None)
@given(offsets=st.lists(st.floats(min_value=0, max_value=MONTH_S), max_size=120),
       components=st.lists(st.sampled_from(["a", "b", "c"]), min_size=120, max_size=120),
       per_lane=st.integers(min_value=1, max_value=40))
def test_clustering_bounds_every_lane_and_keeps_every_rollout(
        offsets: list[float], components: list[str], per_lane: int) -> None:
    markers = [_marker(i, MAR1 + timedelta(seconds=s), components[i])
               for i, s in enumerate(offsets)]
    lanes = cluster_markers(markers, MONTH_S, per_lane)
    assert _ids(lanes) == list(range(len(markers)))
    assert all(len(lane) <= per_lane for lane in lanes.values())


# --------------------------------------------------------------------------- hover and links

def test_hover_escapes_user_text() -> None:
    evil = "<script>alert(1)</script>"
    single = MarkerCluster("checkpointing", (_marker(1, MAR1, name=evil, scope=f"teams {evil}",
                                                      link="https://x.test/?a=<b>"),))
    hover = marker_hover(single)
    assert "<script" not in hover
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hover
    assert "scope: teams &lt;script&gt;" in hover
    assert "https://x.test/?a=&lt;b&gt;" in hover
    cluster = MarkerCluster("checkpointing", (_marker(1, MAR1, name=evil),
                                              _marker(2, MAR1, name=evil)))
    assert "<script" not in marker_hover(cluster)


def test_javascript_links_are_dropped() -> None:
    for bad in ("javascript:alert(1)", " JavaScript:alert(1)", "data:text/html,x",
                "//evil.test/x", "/relative", "ftp://host/x", "https://"):
        assert http_link(bad) == "", bad
        hover = marker_hover(MarkerCluster("c", (_marker(1, MAR1, link=bad),)))
        assert bad.strip() not in hover
    assert http_link("https://wiki.test/rollout?id=1") == "https://wiki.test/rollout?id=1"
    assert http_link("http://wiki.test") == "http://wiki.test"


def test_cluster_hover_lists_ten_names_then_how_many_more() -> None:
    markers = tuple(_marker(i, MAR1 + timedelta(minutes=i)) for i in range(14))
    hover = marker_hover(MarkerCluster("checkpointing", markers))
    assert hover.startswith("<b>14 rollouts</b> · checkpointing")
    assert hover.count("• ") == CLUSTER_NAMES_SHOWN
    assert f"and {14 - CLUSTER_NAMES_SHOWN} more" in hover
    assert "rollout 9 " in hover and "rollout 10 " not in hover


def test_click_targets_are_the_rollout_or_the_filtered_list() -> None:
    assert rollout_lanes.cluster_url(MarkerCluster("c", (_marker(7, MAR1),))) == "/rollouts/7/"
    cluster = MarkerCluster("pt2_compiler", (_marker(1, MAR1),
                                             _marker(2, MAR1 + timedelta(days=2))))
    assert rollout_lanes.cluster_url(cluster) == ("/rollouts/?component=pt2_compiler"
                                                  "&date_from=2026-03-01&date_to=2026-03-03")


def test_trend_draws_a_lane_per_component_above_the_plot() -> None:
    series = {"all": [(date(2026, 3, d), 80.0) for d in range(1, 31)]}
    rng = random.Random(3)
    markers = [_marker(i, MAR1 + timedelta(seconds=rng.uniform(0, 29 * 86400)),
                       rng.choice(["checkpointing", "pt2_compiler", "<i>x</i>"]))
               for i in range(50)]
    fig = go.Figure(trend_figures.ett_trend(series, "day", markers))
    lanes = [t for t in fig.data if t.meta == "rollouts"]
    assert [t.name for t in lanes] == ["rollouts · &lt;i&gt;x&lt;/i&gt;",
                                       "rollouts · checkpointing", "rollouts · pt2_compiler"]
    assert all(t.yaxis == "y2" for t in lanes)
    assert list(fig.layout.yaxis2.ticktext) == ["&lt;i&gt;x&lt;/i&gt;", "checkpointing",
                                                "pt2_compiler"]
    assert fig.layout.yaxis.domain[1] < fig.layout.yaxis2.domain[0]  # lanes above the plot
    counted = sum(int(text) if text else 1 for t in lanes for text in t.text)
    assert counted == 50
    assert all(len(t.x) <= MAX_MARKERS_PER_LANE for t in lanes)
    assert all(url.startswith("/rollouts/") for t in lanes for url in t.customdata)


def test_trend_without_markers_has_no_lanes() -> None:
    fig = go.Figure(trend_figures.ett_trend({"all": [(date(2026, 3, 1), 80.0)]}, "day"))
    assert [t for t in fig.data if t.meta == "rollouts"] == []
    assert "yaxis2" not in fig.layout.to_plotly_json()


def test_markers_outside_the_data_widen_the_axis() -> None:
    late = datetime(2026, 3, 9, 12, tzinfo=UTC)
    fig = go.Figure(trend_figures.ett_trend({"all": [(date(2026, 3, 1), 80.0)]}, "day",
                                            [_marker(1, late)]))
    pad = (late - MAR1) * time_axis.EDGE_PAD  # the data's day starts at MAR1
    assert fig.layout.xaxis.range == (f"{MAR1 - pad:%Y-%m-%d %H:%M:%S}",
                                      f"{late + pad:%Y-%m-%d %H:%M:%S}")


def test_periods_are_drawn_across_their_whole_day_or_week() -> None:
    day = go.Figure(trend_figures.ett_trend({"all": [(date(2026, 3, 2), 80.0)]}, "day"))
    assert (day.data[0].xperiod, day.data[0].xperiodalignment) == (time_axis.DAY_MS, "middle")
    week = go.Figure(trend_figures.component_lost_chart(
        [(date(2026, 3, 2), 1.0)], "c", "week", [_marker(1, datetime(2026, 3, 5, tzinfo=UTC))]))
    bars, lane = week.data
    assert (bars.xperiod, bars.xperiod0) == (7 * time_axis.DAY_MS, time_axis.MONDAY)
    assert lane.xperiod is None  # a rollout is drawn at its own moment


# --------------------------------------------------------------------------- the query

@pytest.mark.django_db
def test_markers_query_filters_by_range_and_component() -> None:
    def rollout(name: str, at: datetime, component: str = "checkpointing",
                **extra: object) -> Rollout:
        return Rollout.objects.create(name=name, component=component, at=at, **extra)

    rollout("before", datetime(2026, 2, 28, 23, 59, tzinfo=UTC))
    first = rollout("first", MAR1, scope={"teams": ["ads"], "job_pattern": "ads-*"},
                    link="javascript:alert(1)")
    other = rollout("other", datetime(2026, 3, 2, tzinfo=UTC), "pt2_compiler",
                    link="https://wiki.test/2")
    last = rollout("last", datetime(2026, 3, 3, 23, 59, 59, tzinfo=UTC), scope={"teams": []})
    rollout("after", datetime(2026, 3, 4, tzinfo=UTC))
    march = DateRange(date(2026, 3, 1), date(2026, 3, 3))

    result = calculate(RolloutMarkersQuery(march))
    assert [m.name for m in result.markers] == ["first", "other", "last"]
    assert result.components == ["checkpointing", "pt2_compiler"]
    by_id = {m.id: m for m in result.markers}
    assert by_id[first.pk].scope == "teams ads · job_pattern ads-*"
    assert by_id[first.pk].link == ""  # javascript: dropped
    assert by_id[other.pk].link == "https://wiki.test/2"
    assert by_id[last.pk].scope == INVALID_SCOPE  # stored before validation: still renders
    assert by_id[first.pk].at == MAR1

    only = calculate(RolloutMarkersQuery(march, component="checkpointing"))
    assert [m.id for m in only.markers] == [first.pk, last.pk]
