"""Figure layouts and colours, read from the figure JSON (issue 14: legend, colours, counts)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest
from django.contrib.auth.models import User
from django.test import Client
from matplotlib.colors import to_hex

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS, PRODUCTIVE
from ettweb.attribution.engine import Segment
from ettweb.dashboard import job_page_figures
from ettweb.ingest.tasks import ingest_batch
from ettweb.pages import figures, fleet_figures
from ettweb.platform import colours
from ettweb.queries.markers import RolloutMarker
from ettweb.queries.weekly import HistoryWeek, IsoWeek
from ettweb.reports.chart import trend_figure
from tests.ettweb.charts import figure_of

ROOT = Path(__file__).resolve().parents[3]
ENGINE_CATEGORIES = {PRODUCTIVE, "repeated_training", "failure", "restart_gap", "unattributed"}
KNOWN_CATEGORIES = sorted(set(DEFAULT_PHASE_COMPONENTS) | ENGINE_CATEGORIES)
KNOWN_COMPONENTS = sorted(set(DEFAULT_PHASE_COMPONENTS.values()))


def plot_args(html: str, div_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The data and layout JSON the page embeds for ``div_id`` (static/ett/ett.js draws it)."""
    figure = figure_of(html, div_id)
    return figure["data"], figure["layout"]


def every_category_segments() -> list[Segment]:
    """Two attempts whose segments hold one second of every known category."""
    return [Segment(100.0 * attempt, 100.0 * attempt + len(KNOWN_CATEGORIES), attempt, 1,
                    dict.fromkeys(KNOWN_CATEGORIES, 1.0)) for attempt in (0, 1)]


# ------------------------------------------------------------------ 1. the timeline legend

def test_timeline_legend_is_horizontal_under_the_plot_with_productive_first() -> None:
    fig = go.Figure(job_page_figures.phase_timeline(every_category_segments(), 0.0))
    names = [trace.name for trace in fig.data]
    assert names[:4] == [PRODUCTIVE, "repeated_training", "failure", "restart_gap"]
    assert sorted(names) == KNOWN_CATEGORIES  # one entry each
    legend = fig.layout.legend
    assert legend.orientation == "h" and legend.traceorder == "normal"
    # Under the plot, anchored to the figure's bottom, and allowed the whole figure's height
    # (plotly scrolls a horizontal legend taller than half the figure by default).
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom")
    assert legend.maxheight == 1
    rows = -(-len(names) // job_page_figures.LEGEND_PER_ROW)
    legend_px = rows * job_page_figures.LEGEND_ROW_PX
    # The figure grows by the legend's rows: the two attempts keep their plot height.
    assert fig.layout.height >= 120 + 40 * 2 + legend_px
    assert fig.layout.margin.b >= figures.MARGIN["b"] + legend_px


@pytest.mark.django_db
def test_job_page_timeline_lists_productive_first(client: Client,
                                                  worked_example_lines: list[str]) -> None:
    ingest_batch(worked_example_lines)
    client.force_login(User.objects.create_user(username="owner", password="pw-owner-1"))
    data, layout = plot_args(client.get("/jobs/j1/").content.decode(), "phase-timeline")
    names = [trace["name"] for trace in data]
    assert names[:4] == [PRODUCTIVE, "repeated_training", "failure", "restart_gap"]
    assert names == sorted(names, key=colours.category_order)
    assert layout["legend"]["orientation"] == "h"
    assert layout["legend"]["yref"] == "container"


# ------------------------------------------------------------------ 2. one colour per name

def test_every_known_category_has_its_own_fixed_colour() -> None:
    chosen = {name: colours.colour_of(name) for name in KNOWN_CATEGORIES}
    assert set(KNOWN_CATEGORIES) == set(colours.CATEGORY_COLOURS)
    assert len(set(chosen.values())) == len(chosen), chosen  # pairwise distinct
    assert chosen == {name: colours.CATEGORY_COLOURS[name] for name in KNOWN_CATEGORIES}
    # The three that once hashed into one palette slot.
    assert len({chosen["checkpoint_load"], chosen["data_init"], chosen["sharding_plan"]}) == 3
    assert chosen["repeated_training"] != chosen["checkpoint_save"]


def test_every_component_has_its_own_fixed_colour() -> None:
    chosen = {name: colours.colour_of(name) for name in KNOWN_COMPONENTS}
    assert set(KNOWN_COMPONENTS) == set(colours.COMPONENT_COLOURS)
    assert len(set(chosen.values())) == len(chosen), chosen
    assert chosen == colours.COMPONENT_COLOURS


def test_unknown_names_never_borrow_a_known_colour() -> None:
    known = set(colours.CATEGORY_COLOURS.values()) | set(colours.COMPONENT_COLOURS.values())
    assert not known & set(colours.PALETTE)
    assert colours.colour_of("my_custom_phase") == colours.colour_of("my_custom_phase")


def test_colour_of_is_the_single_source() -> None:
    """No other module maps a category or component name to a colour of its own."""
    names = "|".join(re.escape(n) for n in [*KNOWN_CATEGORIES, *KNOWN_COMPONENTS])
    pattern = re.compile(r'["\'](' + names + r')["\']\s*:\s*["\']#[0-9a-fA-F]{6}')
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "ettweb").rglob("*.py")
                 if path.name != "colours.py" and pattern.search(path.read_text())]
    assert offenders == []
    assert fleet_figures.colour_of is colours.colour_of


def test_dashboard_charts_use_the_fixed_colours() -> None:
    stacked = go.Figure(fleet_figures.fleet_lost_stacked(
        ["j1"], [{"checkpointing": 5.0, "pt2_compiler": 3.0}], ["checkpointing", "pt2_compiler"]))
    assert {t.name: t.marker.color for t in stacked.data} == {
        "checkpointing": colours.COMPONENT_COLOURS["checkpointing"],
        "pt2_compiler": colours.COMPONENT_COLOURS["pt2_compiler"]}
    tax = go.Figure(fleet_figures.restart_tax_stacked(
        [date(2026, 3, 2)], [{"checkpoint_load": 1.0}], ["checkpoint_load"]))
    assert tax.data[0].marker.color == colours.CATEGORY_COLOURS["checkpoint_load"]
    timeline = go.Figure(job_page_figures.phase_timeline(every_category_segments(), 0.0))
    assert {t.name: t.marker.color for t in timeline.data} == {
        name: colours.CATEGORY_COLOURS[name] for name in KNOWN_CATEGORIES}


def test_the_email_chart_draws_each_rollout_in_its_components_colour() -> None:
    week = IsoWeek(2026, 10)
    history = [HistoryWeek(week=week, ett_pct=80.0)]
    markers = [RolloutMarker(id=i, name=f"r{i}", component=c,
                             at=datetime(2026, 3, 3 + i, 12, tzinfo=UTC), scope="all", link="")
               for i, c in enumerate(["checkpointing", "data_ingestion", "unknown"])]
    figure = trend_figure(history, markers)
    axes = figure.axes[0]
    dashed = [to_hex(line.get_color()) for line in axes.get_lines()
              if line.get_linestyle() == "--"]
    assert dashed == [colours.colour_of(m.component) for m in markers]
    badges = [(to_hex(t.get_bbox_patch().get_facecolor()), to_hex(t.get_color()))
              for t in axes.texts if t.get_bbox_patch() is not None]
    assert badges == [(colours.colour_of(m.component), colours.ink_on(colours.colour_of(
        m.component))) for m in markers]


def test_ink_is_dark_on_light_colours() -> None:
    assert colours.ink_on(colours.colour_of("unknown")) == "#1d2630"
    assert colours.ink_on(colours.colour_of("checkpointing")) == "#ffffff"


# ------------------------------------------------------------------ 3. whole failures

@pytest.mark.parametrize(("largest", "step"), [(0, 1), (1, 1), (5, 1), (6, 2), (11, 5),
                                               (37, 10), (250, 50)])
def test_the_failures_axis_ticks_whole_numbers(largest: int, step: int) -> None:
    fig = go.Figure(fleet_figures.lifecycle_chart(
        [date(2026, 3, 1), date(2026, 3, 2)], [60.0, None], [None, 120.0], [largest, 0]))
    axis = fig.layout.yaxis2
    assert axis.tickformat == ",d"
    assert (axis.tick0, axis.dtick, axis.rangemode) == (0, step, "tozero")
    assert isinstance(axis.dtick, int) and axis.dtick >= 1
    assert largest / axis.dtick <= fleet_figures.COUNT_TICKS - 1


@pytest.mark.django_db
def test_fleet_page_failures_axis_is_integer(client: Client,
                                             worked_example_lines: list[str]) -> None:
    ingest_batch(worked_example_lines)  # one failure: plotly alone ticks 0, 0.5, 1
    client.force_login(User.objects.create_user(username="owner", password="pw-owner-1"))
    _, layout = plot_args(client.get("/fleet/").content.decode(), "lifecycle")
    axis = layout["yaxis2"]
    assert (axis["tickformat"], axis["tick0"], axis["dtick"]) == (",d", 0, 1)
