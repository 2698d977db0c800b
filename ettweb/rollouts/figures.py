"""Plotly figures of the rollout page (view layer; numbers come from ``ImpactResult``).

Four pictures answer the four questions an owner asks of a rollout: did the treated jobs'
ETT% move when it shipped, while the others' did not (trend with both windows shaded)? By
how much, and how sure are we (change and DiD with their intervals)? Did it move every job
or a few (per-job distributions)? Which owner's lost time moved (components)?
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

import plotly.graph_objects as go

from ettweb.dashboard.figures import DAY_MS, LAYOUT
from ettweb.queries.impact import ComponentShift, ImpactResult, TrendDay

TREATED_COLOUR = "#2e6da4"
CONTROL_COLOUR = "#9aa3ad"
WINDOW_FILL = {"before": "rgba(154,163,173,0.16)", "after": "rgba(46,109,164,0.12)"}
GOOD, BAD = "#2e9e5b", "#d1453b"


def _day_start(day: date) -> str:
    return datetime(day.year, day.month, day.day).isoformat()


def _window_shapes(fig: go.Figure, result: ImpactResult) -> None:
    """Shade both windows (whole days) and draw the rollout moment as a line."""
    windows = result.windows
    spans = [("before", windows.before)]
    if windows.after is not None:
        spans.append(("after", windows.after))
    for label, (first, last) in spans:
        fig.add_vrect(x0=_day_start(first), x1=_day_start(last + timedelta(days=1)),
                      fillcolor=WINDOW_FILL[label], line_width=0, layer="below",
                      annotation_text=f"{label} ({(last - first).days + 1} d)",
                      annotation_position="top left", annotation_font_color="#5f6b77")
    at = result.rollout.at.replace(tzinfo=None).isoformat()
    fig.add_vline(x=at, line_dash="dot", line_color="#1d2630")
    fig.add_annotation(x=at, y=1.0, yref="paper", text="rollout", showarrow=False,
                       yanchor="bottom", font={"size": 11})


def trend(result: ImpactResult) -> go.Figure:
    """Daily ETT% of the treated and the control jobs, windows shaded, rollout marked.

    Points sit at noon of their UTC day, so a day's point lies inside its shaded window.
    """
    def series(days: list[TrendDay], treated: bool) -> tuple[list[str], list[float | None]]:
        xs = [datetime(d.day.year, d.day.month, d.day.day, 12).isoformat() for d in days]
        ys = [d.treated_ett_pct if treated else d.control_ett_pct for d in days]
        return xs, ys

    traces = []
    x, y = series(result.trend, True)
    traces.append(go.Scatter(name="treated (in scope)", x=x, y=y, mode="lines+markers",
                             line={"color": TREATED_COLOUR}, connectgaps=False,
                             hovertemplate="%{x|%Y-%m-%d}: %{y:.2f}%<extra>treated</extra>"))
    if result.control is not None:
        x, y = series(result.trend, False)
        traces.append(go.Scatter(name="control (out of scope)", x=x, y=y, mode="lines+markers",
                                 line={"color": CONTROL_COLOUR, "dash": "dash"},
                                 hovertemplate="%{x|%Y-%m-%d}: %{y:.2f}%<extra>control</extra>"))
    fig = go.Figure(traces)
    fig.update_layout(**LAYOUT, height=340, yaxis={"title": "ETT% (GPU-weighted)"},
                      xaxis={"type": "date", "tickformat": "%b %d"},
                      legend={"orientation": "h", "y": -0.18})
    days = 2 * result.window_days + 1
    if days <= 15:  # one label per day, centred on its day (points sit at noon)
        fig.update_xaxes(dtick=DAY_MS, ticklabelmode="period")
    elif days <= 63:  # one a week: a label a day would overlap
        fig.update_xaxes(dtick=7 * DAY_MS)
    _window_shapes(fig, result)
    return fig


def _interval_row(label: str, value: float | None,
                  ci: tuple[float, float] | None) -> tuple[str, float | None, float, float]:
    """(label, value, distance up to the interval's top, distance down to its bottom)."""
    centre = value or 0.0
    low, high = ci if ci else (centre, centre)
    return label, value, high - centre, centre - low


def change_intervals(result: ImpactResult) -> go.Figure:
    """Each change (points) with its 95% interval as error bars around a zero line."""
    rows = [_interval_row("treated", result.treated.change_pts, result.treated.ci95_pts)]
    if result.control is not None:
        rows.append(_interval_row("control", result.control.change_pts,
                                  result.control.ci95_pts))
        rows.append(_interval_row("DiD", result.did_pts, result.did_ci95_pts))
    rows = [row for row in rows if row[1] is not None]
    colours = [GOOD if (v or 0) > 0 else BAD for _, v, _, _ in rows]
    fig = go.Figure(go.Scatter(
        x=[v for _, v, _, _ in rows], y=[label for label, *_ in rows], mode="markers",
        marker={"size": 12, "color": colours},
        error_x={"type": "data", "symmetric": False, "array": [row[2] for row in rows],
                 "arrayminus": [row[3] for row in rows], "thickness": 2, "width": 8},
        hovertemplate="%{y}: %{x:+.2f} pts<extra></extra>"))
    fig.add_vline(x=0, line_color="#1d2630", line_width=1)
    fig.update_layout(**LAYOUT, height=90 + 50 * max(len(rows), 1),
                      xaxis={"title": "change in ETT% (points), 95% interval",
                             "zeroline": False},
                      yaxis={"autorange": "reversed"})
    return fig


def distributions(result: ImpactResult) -> go.Figure:
    """Each treated job's own ETT% before and after, as box plots with the jobs as points."""
    points = "all" if max(len(result.treated_before_ett), len(result.treated_after_ett)) \
        <= 300 else "outliers"
    fig = go.Figure([
        go.Box(name="before", y=result.treated_before_ett, boxpoints=points, jitter=0.4,
               pointpos=0, marker={"color": CONTROL_COLOUR, "size": 4},
               line={"color": "#5f6b77"}, hovertemplate="%{y:.2f}%<extra>before</extra>"),
        go.Box(name="after", y=result.treated_after_ett, boxpoints=points, jitter=0.4,
               pointpos=0, marker={"color": TREATED_COLOUR, "size": 4},
               line={"color": TREATED_COLOUR}, hovertemplate="%{y:.2f}%<extra>after</extra>"),
    ])
    fig.update_layout(**LAYOUT, height=340, showlegend=False,
                      yaxis={"title": "job ETT% in the window", "range": [0, 101]})
    return fig


def component_shifts(shifts: list[ComponentShift]) -> go.Figure:
    """Change of each component's lost share (points of wall time): green is less lost."""
    names = [s.component for s in shifts]
    values = [s.change_pts or 0.0 for s in shifts]
    fig = go.Figure(go.Bar(
        x=values, y=names, orientation="h",
        marker={"color": [GOOD if v < 0 else BAD for v in values]},
        customdata=[[s.before_lost_pct or 0.0, s.after_lost_pct or 0.0] for s in shifts],
        hovertemplate=("%{y}: %{customdata[0]:.2f}% → %{customdata[1]:.2f}% of wall time "
                       "(%{x:+.2f} pts)<extra></extra>")))
    fig.add_vline(x=0, line_color="#1d2630", line_width=1)
    fig.update_layout(**LAYOUT, height=90 + 30 * max(len(shifts), 1),
                      xaxis_title="change in lost share (points of wall time)",
                      yaxis={"autorange": "reversed"})
    return fig
