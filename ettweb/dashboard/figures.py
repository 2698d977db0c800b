"""Plotly figures for the dashboard pages — view layer only.

Queries return plain numbers; only views call these builders, so a future JSON API or an
export can reuse the queries without dragging plotly along. Every figure is rendered as an
HTML fragment without plotly.js: the page loads our own static copy (no CDN).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import pairwise

import plotly.graph_objects as go

from ettweb.attribution.components import PRODUCTIVE
from ettweb.attribution.engine import Segment

#: Fixed colours for the categories people look for first; other phases cycle a palette.
CATEGORY_COLOURS = {
    PRODUCTIVE: "#2e9e5b",
    "repeated_training": "#e8912d",
    "failure": "#d1453b",
    "restart_gap": "#9aa3ad",
    "unattributed": "#cfd4da",
}
#: Owning components get fixed colours too, so one owner looks the same on every chart.
COMPONENT_COLOURS = {
    "scheduler": "#7f8c9a",
    "cluster_runtime": "#9d755d",
    "distributed_runtime": "#eeca3b",
    "trainer_init": "#72b7b2",
    "data_ingestion": "#54a24b",
    "pt2_compiler": "#b279a2",
    "checkpointing": "#4c78a8",
    "evaluation": "#ff9da6",
    "model_publishing": "#f58518",
    "reliability": "#d1453b",
    "unknown": "#cfd4da",
}
PALETTE = ("#4c78a8", "#72b7b2", "#b279a2", "#9d755d", "#eeca3b", "#54a24b", "#ff9da6",
           "#79706e", "#bab0ac", "#f58518")
LAYOUT = {"margin": {"l": 10, "r": 10, "t": 30, "b": 40}, "template": "plotly_white",
          "font": {"family": "system-ui, sans-serif", "size": 12}}


@dataclass(frozen=True)
class Unit:
    """A time unit chosen so the axis reads in small numbers."""

    name: str
    seconds: float


def unit_for(max_seconds: float) -> Unit:
    """Hours for long jobs, minutes for short ones, seconds for tiny demos."""
    if max_seconds >= 2 * 3600:
        return Unit("hours", 3600.0)
    if max_seconds >= 120:
        return Unit("minutes", 60.0)
    return Unit("seconds", 1.0)


def colour_of(name: str) -> str:
    """Stable colour for a category or component: fixed for known names, hashed otherwise
    (never by position, so a name keeps its colour from page to page)."""
    fixed = CATEGORY_COLOURS.get(name) or COMPONENT_COLOURS.get(name)
    return fixed or PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def to_fragment(fig: go.Figure, div_id: str) -> str:
    """Figure as an embeddable ``<div>``; plotly.js itself comes from our static files."""
    return str(fig.to_html(include_plotlyjs=False, full_html=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True}))


def lost_by_component_bar(lost_s: Mapping[str, float]) -> go.Figure:
    """One job's lost time per owning component, largest first."""
    items = sorted(((c, s) for c, s in lost_s.items() if s > 0), key=lambda kv: -kv[1])
    unit = unit_for(max((s for _, s in items), default=0.0))
    names = [c for c, _ in items]
    fig = go.Figure(go.Bar(
        x=[s / unit.seconds for _, s in items], y=names, orientation="h",
        marker_color=[colour_of(c) for c in names],
        hovertemplate="%{y}: %{x:.2f} " + unit.name + "<extra></extra>",
    ))
    fig.update_layout(**LAYOUT, height=80 + 28 * max(len(items), 1),
                      xaxis_title=f"lost time ({unit.name})", yaxis={"autorange": "reversed"})
    return fig


def fleet_lost_stacked(jobs: Sequence[str], lost: Sequence[Mapping[str, float]],
                       components: Sequence[str]) -> go.Figure:
    """Lost time per component per job, stacked: which owner costs each job the most."""
    unit = unit_for(max((sum(row.values()) for row in lost), default=0.0))
    fig = go.Figure([
        go.Bar(name=component, x=list(jobs), y=[row.get(component, 0.0) / unit.seconds
                                                for row in lost],
               marker_color=colour_of(component),
               hovertemplate="%{x}: %{y:.2f} " + unit.name + "<extra>" + component + "</extra>")
        for component in components
    ])
    fig.update_layout(**LAYOUT, barmode="stack", height=360,
                      yaxis_title=f"lost time ({unit.name})", legend_title="component")
    return fig


def _piece_order(category: str) -> tuple[int, str]:
    """Repeated steps first: a restarted train span re-does old steps before new ones (§3.7)."""
    return (0 if category == "repeated_training" else 1, category)


def _pieces(segment: Segment) -> list[tuple[str, float, float]]:
    """Lay a segment's shares side by side in time so each category gets its own bar."""
    pieces, cursor = [], segment.start
    for category, seconds in sorted(segment.shares.items(), key=lambda kv: _piece_order(kv[0])):
        pieces.append((category, cursor, seconds))
        cursor += seconds
    return pieces


def _append_merged(pieces: list[tuple[str, float, float]], row: str, start: float,
                   seconds: float) -> None:
    """Extend the previous bar when this piece continues it: a training span is re-opened
    every minute, and a week-long job should not draw ten thousand touching bars."""
    if pieces and pieces[-1][0] == row and abs(pieces[-1][1] + pieces[-1][2] - start) < 1e-9:
        last_row, last_start, last_seconds = pieces[-1]
        pieces[-1] = (last_row, last_start, last_seconds + seconds)
    else:
        pieces.append((row, start, seconds))


def phase_timeline(segments: Sequence[Segment], job_start: float) -> go.Figure:
    """Horizontal bars per segment, one row per attempt, coloured by category.

    Restart gaps show as grey bars (or blank space when a gap was not attributed).
    """
    unit = unit_for(max((s.end for s in segments), default=job_start) - job_start)
    by_category: dict[str, list[tuple[str, float, float]]] = {}
    for segment in segments:
        row = f"attempt {segment.attempt}"
        for category, start, seconds in _pieces(segment):
            _append_merged(by_category.setdefault(category, []), row,
                           (start - job_start) / unit.seconds, seconds / unit.seconds)
    fig = go.Figure([
        go.Bar(name=category, orientation="h", y=[p[0] for p in pieces],
               base=[p[1] for p in pieces], x=[p[2] for p in pieces],
               marker_color=colour_of(category),
               hovertemplate=(f"{category}<br>from %{{base:.2f}} for %{{x:.2f}} {unit.name}"
                              "<extra>%{y}</extra>"))
        for category, pieces in sorted(by_category.items())
    ])
    rows = sorted({f"attempt {s.attempt}" for s in segments}, key=lambda r: int(r.split()[1]))
    fig.update_layout(**LAYOUT, barmode="overlay", height=120 + 40 * len(rows),
                      xaxis_title=f"{unit.name} since the job started",
                      yaxis={"categoryorder": "array", "categoryarray": rows[::-1]},
                      legend_title="category")
    return fig


DAY_MS = 86_400_000


def _period_axis(fig: go.Figure, periods: Sequence[str]) -> None:
    """Days (or weeks) on the x axis as whole days: with one or two points plotly would
    otherwise zoom into milliseconds around them and label ticks 23:59:59.999."""
    days = sorted({date.fromisoformat(p) for p in periods})
    fig.update_xaxes(type="date", tickformat="%b %d", hoverformat="%Y-%m-%d")
    if not days:
        return
    step = min(((b - a).days for a, b in pairwise(days)), default=1)
    # Bars on a date axis are as wide as their data says: one bar would be a hairline.
    fig.update_traces(width=0.8 * step * DAY_MS, selector={"type": "bar"})
    first, last = days[0] - timedelta(days=step), days[-1] + timedelta(days=step)
    fig.update_xaxes(range=[first.isoformat(), last.isoformat()])
    if (last - first).days <= 31:
        fig.update_xaxes(dtick=DAY_MS)


def ett_trend(series: Mapping[str, Sequence[tuple[date, float]]], interval: str) -> go.Figure:
    """ETT% per day or week, one line per group (GPU-weighted within each point)."""
    fig = go.Figure([
        go.Scatter(name=group, x=[p.isoformat() for p, _ in points], y=[v for _, v in points],
                   mode="lines+markers",
                   hovertemplate="%{x}: %{y:.2f}%<extra>" + group + "</extra>")
        for group, points in series.items()
    ])
    fig.update_layout(**LAYOUT, height=340, yaxis={"title": "ETT%", "range": [0, 100]},
                      xaxis_title=f"{interval} (UTC)", legend_title="group")
    _period_axis(fig, [p.isoformat() for points in series.values() for p, _ in points])
    return fig


def lost_gpu_hours_bar(gpu_hours: Mapping[str, float]) -> go.Figure:
    """The fleet's lost GPU-hours per owning component, largest first."""
    items = sorted(((c, h) for c, h in gpu_hours.items() if h > 0), key=lambda kv: -kv[1])
    names = [c for c, _ in items]
    fig = go.Figure(go.Bar(
        x=[h for _, h in items], y=names, orientation="h",
        marker_color=[colour_of(c) for c in names],
        hovertemplate="%{y}: %{x:.2f} GPU-hours<extra></extra>",
    ))
    fig.update_layout(**LAYOUT, height=80 + 28 * max(len(items), 1),
                      xaxis_title="lost GPU-hours", yaxis={"autorange": "reversed"})
    return fig


def restart_tax_stacked(periods: Sequence[date], by_category: Sequence[Mapping[str, float]],
                        categories: Sequence[str]) -> go.Figure:
    """GPU-hours spent recovering from failures per period, stacked by what they went to."""
    fig = go.Figure([
        go.Bar(name=category, x=[p.isoformat() for p in periods],
               y=[row.get(category, 0.0) for row in by_category],
               marker_color=colour_of(category),
               hovertemplate="%{x}: %{y:.2f} GPU-hours<extra>" + category + "</extra>")
        for category in categories
    ])
    fig.update_layout(**LAYOUT, barmode="stack", height=320, yaxis_title="GPU-hours",
                      legend_title="category")
    _period_axis(fig, [p.isoformat() for p in periods])
    return fig


def lifecycle_chart(periods: Sequence[date], time_to_start_s: Sequence[float | None],
                    time_to_recover_s: Sequence[float | None],
                    failures: Sequence[int]) -> go.Figure:
    """Mean time to start and to recover (minutes, lines) and failures (bars, right axis)."""
    x = [p.isoformat() for p in periods]

    def minutes(values: Sequence[float | None]) -> list[float | None]:
        return [None if v is None else v / 60.0 for v in values]

    fig = go.Figure([
        go.Bar(name="failures", x=x, y=list(failures), yaxis="y2", opacity=0.35,
               marker_color=colour_of("failure")),
        go.Scatter(name="time to start", x=x, y=minutes(time_to_start_s),
                   mode="lines+markers", connectgaps=True),
        go.Scatter(name="time to recover", x=x, y=minutes(time_to_recover_s),
                   mode="lines+markers", connectgaps=True),
    ])
    fig.update_layout(**LAYOUT, height=320, yaxis_title="mean minutes",
                      yaxis2={"title": "failures", "overlaying": "y", "side": "right",
                              "rangemode": "tozero"})
    _period_axis(fig, x)
    return fig
