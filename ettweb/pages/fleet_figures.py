"""Figures of where a fleet's time was lost: per job, per owning component, per day or
week, what recovering from failures cost, and how long jobs took to start and recover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from ettweb.pages.figures import Figure, base_layout, hover_text, title, unit_for
from ettweb.pages.time_axis import period_axis
from ettweb.platform.colours import category_order, colour_of


def fleet_lost_stacked(jobs: Sequence[str], lost: Sequence[Mapping[str, float]],
                       components: Sequence[str]) -> Figure:
    """Lost time per component per job, stacked: which owner costs each job the most."""
    unit = unit_for(max((sum(row.values()) for row in lost), default=0.0))
    bars = [{"type": "bar", "name": component, "x": list(jobs),
             "y": [row.get(component, 0.0) / unit.seconds for row in lost],
             "marker": {"color": colour_of(component)},
             "hovertemplate": ("%{x}: %{y:.2f} " + unit.name + "<extra>" + component
                               + "</extra>")}
            for component in components]
    return {"data": bars, "layout": base_layout(
        barmode="stack", height=360, yaxis={"title": title(f"lost time ({unit.name})")},
        legend={"title": title("component")})}


#: Lines a lost-share chart draws; the rest are in the table below it.
SHARE_LINES = 8


def lost_share_lines(periods: Sequence[date], shares: Mapping[str, Sequence[float]],
                     interval: str) -> Figure:
    """Each component's lost share (points of the period's wall time) per day or week, the
    largest losers first (``shares`` comes ordered so): which component's loss grew or
    shrank over the range, without a growing fleet looking worse."""
    x = [p.isoformat() for p in periods]
    traces = [{"type": "scatter", "name": hover_text(name), "x": x, "y": list(values),
               "mode": "lines", "line": {"color": colour_of(name), "width": 2},
               "hovertemplate": "%{x}: %{y:.2f} pts<extra>" + hover_text(name) + "</extra>"}
              for name, values in list(shares.items())[:SHARE_LINES]]
    # The legend below the plot: at a phone's width a legend beside it leaves no plot.
    fig = {"data": traces, "layout": base_layout(
        height=380, yaxis={"title": title("lost share (pts of wall time)"),
                           "rangemode": "tozero"},
        xaxis={"title": title(f"{interval} (UTC)")},
        legend={"orientation": "h", "yanchor": "top", "y": -0.22})}
    period_axis(fig, x, interval)
    return fig


def lost_gpu_hours_bar(gpu_hours: Mapping[str, float]) -> Figure:
    """The fleet's lost GPU-hours per owning component, largest first."""
    items = sorted(((c, h) for c, h in gpu_hours.items() if h > 0), key=lambda kv: -kv[1])
    names = [c for c, _ in items]
    bar = {"type": "bar", "x": [h for _, h in items], "y": names, "orientation": "h",
           "marker": {"color": [colour_of(c) for c in names]},
           "hovertemplate": "%{y}: %{x:.2f} GPU-hours<extra></extra>"}
    return {"data": [bar], "layout": base_layout(
        height=80 + 28 * max(len(items), 1), xaxis={"title": title("lost GPU-hours")},
        yaxis={"autorange": "reversed"})}


def lost_over_time_stacked(periods: Sequence[date], gpu_hours: Mapping[str, Sequence[float]],
                           interval: str = "day") -> Figure:
    """Lost GPU-hours per period, stacked by owning component (the largest loser at the
    bottom, as ``gpu_hours`` is ordered)."""
    x = [p.isoformat() for p in periods]
    bars = [{"type": "bar", "name": component, "x": x, "y": list(values),
             "marker": {"color": colour_of(component)},
             "hovertemplate": ("%{x}: %{y:.2f} GPU-hours<extra>" + hover_text(component)
                               + "</extra>")}
            for component, values in gpu_hours.items()]
    fig = {"data": bars, "layout": base_layout(
        barmode="stack", height=340, yaxis={"title": title("lost GPU-hours")},
        legend={"title": title("component")})}
    period_axis(fig, x, interval)
    return fig


def restart_tax_stacked(periods: Sequence[date], by_category: Sequence[Mapping[str, float]],
                        categories: Sequence[str], interval: str = "day") -> Figure:
    """GPU-hours spent recovering from failures per period, stacked by what they went to."""
    x = [p.isoformat() for p in periods]
    bars = [{"type": "bar", "name": category, "x": x,
             "y": [row.get(category, 0.0) for row in by_category],
             "marker": {"color": colour_of(category)},
             "hovertemplate": "%{x}: %{y:.2f} GPU-hours<extra>" + category + "</extra>"}
            for category in sorted(categories, key=category_order)]
    fig = {"data": bars, "layout": base_layout(
        barmode="stack", height=320, yaxis={"title": title("GPU-hours")},
        legend={"title": title("category")})}
    period_axis(fig, x, interval)
    return fig


def lifecycle_chart(periods: Sequence[date], time_to_start_s: Sequence[float | None],
                    time_to_recover_s: Sequence[float | None],
                    failures: Sequence[int], interval: str = "day") -> Figure:
    """Mean time to start and to recover (minutes, lines) and failures (bars, right axis)."""
    x = [p.isoformat() for p in periods]

    def minutes(values: Sequence[float | None]) -> list[float | None]:
        return [None if v is None else v / 60.0 for v in values]

    traces = [
        {"type": "bar", "name": "failures", "x": x, "y": list(failures), "yaxis": "y2",
         "opacity": 0.35, "marker": {"color": colour_of("failure")}},
        {"type": "scatter", "name": "time to start", "x": x, "y": minutes(time_to_start_s),
         "mode": "lines+markers", "connectgaps": True},
        {"type": "scatter", "name": "time to recover", "x": x,
         "y": minutes(time_to_recover_s), "mode": "lines+markers", "connectgaps": True},
    ]
    fig = {"data": traces, "layout": base_layout(
        height=320, yaxis={"title": title("mean minutes")},
        yaxis2={"title": title("failures"), "overlaying": "y", "side": "right",
                **count_axis(max(failures, default=0))})}
    period_axis(fig, x, interval)
    return fig


#: Most ticks a count axis shows; the step grows in 1-2-5 steps to stay under it.
COUNT_TICKS = 6


def count_step(largest: int, ticks: int = COUNT_TICKS) -> int:
    """The tick step of a count axis up to ``largest``: 1, 2, 5, 10, 20, 50… never below 1."""
    step = 1
    while largest > step * (ticks - 1):
        step = step * 5 // 2 if str(step).startswith("2") else step * 2
    return step


def count_axis(largest: int) -> dict[str, Any]:
    """Axis settings for a count (failures): whole-number ticks from zero. Why: plotly's
    automatic ticks put 0.5 failures on a day with one."""
    return {"rangemode": "tozero", "tick0": 0, "dtick": count_step(largest),
            "tickformat": ",d"}
