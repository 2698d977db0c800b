"""Plotly figures of the rollout page (view layer; numbers come from ``ImpactResult``).

Four pictures answer the four questions an owner asks of a rollout: did the treated jobs'
ETT% move when it shipped, while the others' did not (trend with both windows shaded)? By
how much, and how sure are we (change and DiD with their intervals)? Did it move every job
or a few (per-job distributions)? Which owner's lost time moved (components)?

Built as plain figure JSON (plotly's own schema: ``data`` traces and a ``layout``), not as
``go.Figure`` objects: validating four figures, their shapes and a box plot of every treated
job cost about as much as the impact itself. ``tests/ettweb/rollouts/test_rollout_figures.py``
validates each against plotly's schema instead, once per test run.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from ettweb.pages.figures import MARGIN, base_layout
from ettweb.pages.time_axis import DAY_MS
from ettweb.pages.trend_figures import fitted_percent_range, percent_scale_menu
from ettweb.queries.impact import ComponentShift, ImpactResult, TrendDay

Figure = dict[str, Any]

TREATED_COLOUR = "#2e6da4"
CONTROL_COLOUR = "#9aa3ad"
WINDOW_FILL = {"before": "rgba(154,163,173,0.16)", "after": "rgba(46,109,164,0.12)"}
GOOD, BAD = "#2e9e5b", "#d1453b"
INK = "#1d2630"


def _day_start(day: date) -> str:
    return datetime(day.year, day.month, day.day).isoformat()


def _vertical_line(x: Any, **line: Any) -> dict[str, Any]:
    """A line across the whole plot height at ``x`` (what ``add_vline`` draws)."""
    return {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1,
            "yref": "y domain", "line": line}


def _window_shapes(result: ImpactResult) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both windows shaded (whole days), the rollout moment as a line: shapes, annotations."""
    windows = result.windows
    spans = [("before", windows.before)]
    if windows.after is not None:
        spans.append(("after", windows.after))
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for label, (first, last) in spans:
        x0, x1 = _day_start(first), _day_start(last + timedelta(days=1))
        shapes.append({"type": "rect", "x0": x0, "x1": x1, "xref": "x", "y0": 0, "y1": 1,
                       "yref": "y domain", "fillcolor": WINDOW_FILL[label],
                       "line": {"width": 0}, "layer": "below"})
        notes.append({"text": f"{label} ({(last - first).days + 1} d)", "x": x0,
                      "xref": "x", "xanchor": "left", "y": 1, "yref": "y domain",
                      "yanchor": "top", "showarrow": False, "font": {"color": "#5f6b77"}})
    at = result.rollout.at.replace(tzinfo=None).isoformat()
    shapes.append(_vertical_line(at, dash="dot", color=INK))
    notes.append({"x": at, "y": 1.0, "yref": "paper", "text": "rollout", "showarrow": False,
                  "yanchor": "bottom", "font": {"size": 11}})
    return shapes, notes


def trend(result: ImpactResult) -> Figure:
    """Daily ETT% of the treated and the control jobs, windows shaded, rollout marked.

    Points sit at noon of their UTC day, so a day's point lies inside its shaded window.
    """
    def series(days: list[TrendDay], treated: bool) -> tuple[list[str], list[float | None]]:
        xs = [datetime(d.day.year, d.day.month, d.day.day, 12).isoformat() for d in days]
        ys = [d.treated_ett_pct if treated else d.control_ett_pct for d in days]
        return xs, ys

    x, y = series(result.trend, True)
    traces = [{"type": "scatter", "name": "treated (in scope)", "x": x, "y": y,
               "mode": "lines+markers", "line": {"color": TREATED_COLOUR},
               "connectgaps": False,
               "hovertemplate": "%{x|%Y-%m-%d}: %{y:.2f}%<extra>treated</extra>"}]
    if result.control is not None:
        x, y = series(result.trend, False)
        traces.append({"type": "scatter", "name": "control (out of scope)", "x": x, "y": y,
                       "mode": "lines+markers",
                       "line": {"color": CONTROL_COLOUR, "dash": "dash"},
                       "hovertemplate": "%{x|%Y-%m-%d}: %{y:.2f}%<extra>control</extra>"})
    xaxis: dict[str, Any] = {"type": "date", "tickformat": "%b %d"}
    days = 2 * result.window_days + 1
    if days <= 15:  # one label per day, centred on its day (points sit at noon)
        xaxis.update(dtick=DAY_MS, ticklabelmode="period")
    elif days <= 63:  # one a week: a label a day would overlap
        xaxis.update(dtick=7 * DAY_MS)
    shapes, notes = _window_shapes(result)
    return {"data": traces, "layout": base_layout(
        height=340, yaxis={"title": {"text": "ETT% (GPU-weighted)"}}, xaxis=xaxis,
        legend={"orientation": "h", "y": -0.18}, shapes=shapes, annotations=notes)}


def _interval_row(label: str, value: float | None,
                  ci: tuple[float, float] | None) -> tuple[str, float | None, float, float]:
    """(label, value, distance up to the interval's top, distance down to its bottom)."""
    centre = value or 0.0
    low, high = ci if ci else (centre, centre)
    return label, value, high - centre, centre - low


def change_intervals(result: ImpactResult) -> Figure:
    """Each change (points) with its 95% interval as error bars around a zero line: the
    rollout's component's lost share first (§6.1; less is better), then the adjusted ETT%
    (§6.2), then §6's unadjusted treated, control and DiD changes (more is better)."""
    effect, adjusted = result.component_effect, result.adjusted
    rows = [(*_interval_row(f"{effect.component} lost share", effect.deciding_pts,
                            effect.deciding_ci95_pts), True),
            (*_interval_row("ETT% adjusted", adjusted.deciding_pts,
                            adjusted.deciding_ci95_pts), False),
            (*_interval_row("ETT% treated", result.treated.change_pts,
                            result.treated.ci95_pts), False)]
    if result.control is not None:
        rows.append((*_interval_row("ETT% control", result.control.change_pts,
                                    result.control.ci95_pts), False))
        rows.append((*_interval_row("ETT% DiD", result.did_pts, result.did_ci95_pts), False))
    rows = [row for row in rows if row[1] is not None]
    colours = [GOOD if ((v or 0) < 0) == lower else BAD for _, v, _, _, lower in rows]
    trace = {"type": "scatter", "x": [row[1] for row in rows],
             "y": [row[0] for row in rows], "mode": "markers",
             "marker": {"size": 12, "color": colours},
             "error_x": {"type": "data", "symmetric": False, "array": [row[2] for row in rows],
                         "arrayminus": [row[3] for row in rows], "thickness": 2, "width": 8},
             "hovertemplate": "%{y}: %{x:+.2f} pts<extra></extra>"}
    return {"data": [trace], "layout": base_layout(
        height=90 + 50 * max(len(rows), 1), shapes=[_vertical_line(0, color=INK, width=1)],
        xaxis={"title": {"text": "change (points), 95% interval; with a control, the "
                                 "difference in differences decides"}, "zeroline": False},
        yaxis={"autorange": "reversed"}, margin={**MARGIN, "l": 190})}


def distributions(result: ImpactResult) -> Figure:
    """Each treated job's own ETT% before and after, as box plots with the jobs as points."""
    points = "all" if max(len(result.treated_before_ett), len(result.treated_after_ett)) \
        <= 300 else "outliers"

    def box(name: str, values: list[float], colour: str, line: str) -> dict[str, Any]:
        return {"type": "box", "name": name, "y": values, "boxpoints": points, "jitter": 0.4,
                "pointpos": 0, "marker": {"color": colour, "size": 4}, "line": {"color": line},
                "hovertemplate": f"%{{y:.2f}}%<extra>{name}</extra>"}

    fitted = fitted_percent_range([*result.treated_before_ett, *result.treated_after_ett])
    return {"data": [box("before", result.treated_before_ett, CONTROL_COLOUR, "#5f6b77"),
                     box("after", result.treated_after_ett, TREATED_COLOUR, TREATED_COLOUR)],
            "layout": base_layout(height=340, showlegend=False,
                                  yaxis={"title": {"text": "job ETT% in the window"},
                                         "range": fitted},
                                  updatemenus=percent_scale_menu(fitted))}


def component_shifts(shifts: list[ComponentShift]) -> Figure:
    """Change of each component's lost share (points of wall time): green is less lost."""
    names = [s.component for s in shifts]
    values = [s.change_pts or 0.0 for s in shifts]
    trace = {"type": "bar", "x": values, "y": names, "orientation": "h",
             "marker": {"color": [GOOD if v < 0 else BAD for v in values]},
             "customdata": [[s.before_lost_pct or 0.0, s.after_lost_pct or 0.0] for s in shifts],
             "hovertemplate": ("%{y}: %{customdata[0]:.2f}% → %{customdata[1]:.2f}% of wall "
                               "time (%{x:+.2f} pts)<extra></extra>")}
    return {"data": [trace], "layout": base_layout(
        height=90 + 30 * max(len(shifts), 1), shapes=[_vertical_line(0, color=INK, width=1)],
        xaxis={"title": {"text": "change in lost share (points of wall time)"}},
        yaxis={"autorange": "reversed"})}
