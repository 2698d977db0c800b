"""Figures of a number over days or weeks with rollouts above it: the fleet's ETT% trend
(one line per group, the previous period dashed beneath) and one component's lost
GPU-hours and lost share.

Why the y axis fits the data: a fleet moving from 90% to 96% is a flat line at the top of a
0-100 axis, and the move is what an owner looks for (a toggle restores 0-100).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from plotly.colors import qualitative

from ettweb.pages.figures import Figure, base_layout, hover_text, title
from ettweb.pages.rollout_lanes import with_rollout_lanes
from ettweb.pages.time_axis import partial_days, period_label, shade_outside_range
from ettweb.platform.colours import colour_of
from ettweb.queries.base import ALL, DateRange
from ettweb.queries.markers import RolloutMarker

#: One colour per trend group, by the group's place in the legend: a group's previous
#: period is drawn dashed in its own colour (plotly's default sequence, so nothing else moves).
GROUP_COLOURS = tuple(qualitative.Plotly)


@dataclass(frozen=True)
class PreviousPeriod:
    """The trend of the period just before the range (each group's (period, ETT%) points),
    drawn ``shift`` later so it lies under the range it is compared with."""

    series: Mapping[str, Sequence[tuple[date, float]]]
    first_day: date
    last_day: date
    shift: timedelta


def overlay_shift(days: int, interval: str) -> timedelta:
    """How far the previous period's points move onto the range: its length in days, in
    whole weeks for a weekly trend so that each of its Mondays lands on a Monday."""
    if interval == "week":
        return timedelta(days=7 * max(1, round(days / 7)))
    return timedelta(days=days)


def _previous_traces(previous: PreviousPeriod, colours: Mapping[str, str],
                     interval: str) -> list[dict[str, Any]]:
    """Dashed lines of the previous period, at the shifted positions; the hover names the
    actual day or week (``customdata``), never the shifted one."""
    traces = []
    for group, points in previous.series.items():
        label = "previous period" if group == ALL else f"{hover_text(group)} (previous)"
        traces.append({
            "type": "scatter", "name": label, "legendgroup": hover_text(group), "meta": "previous",
            "x": [(p + previous.shift).isoformat() for p, _ in points],
            "y": [v for _, v in points],
            "customdata": [period_label(p, interval) for p, _ in points],
            "mode": "lines+markers",
            "line": {"dash": "dash", "width": 1.5, "color": colours.get(group, "#9aa3ad")},
            "marker": {"size": 4}, "opacity": 0.8,
            "hovertemplate": "%{customdata}: %{y:.2f}%<extra>" + label + "</extra>"})
    return traces


#: The least room above and below the data on a fitted ETT% axis, in points.
FIT_PAD_PTS = 1.0
#: Half the height of the reference band around the range's own ETT%, in points.
BAND_PTS = 1.0
BAND_COLOUR = "#4c78a8"


def fitted_percent_range(values: Sequence[float]) -> list[float]:
    """A y range that shows how the values move: their spread padded by a tenth of itself
    (at least ``FIT_PAD_PTS``), inside 0-100. Why not 0-100: a fleet moving from 90% to
    96% is a flat line at the top of a 0-100 axis, and the move is what an owner looks for."""
    if not values:
        return [0.0, 100.0]
    low, high = min(values), max(values)
    pad = max(FIT_PAD_PTS, 0.1 * (high - low))
    return [max(0.0, low - pad), min(100.0, high + pad)]


def percent_scale_menu(fitted: Sequence[float]) -> list[dict[str, Any]]:
    """Two buttons above a percentage chart: *fit to data* (the default) and *0-100%*, the
    whole scale, for whoever wants the size of a move against everything."""
    return [{"type": "buttons", "direction": "left", "showactive": True, "active": 0,
             "x": 0.0, "xanchor": "left", "y": 1.0, "yanchor": "bottom", "pad": {"b": 4},
             "font": {"size": 11},
             "buttons": [{"label": "fit to data", "method": "relayout",
                          "args": [{"yaxis.range": list(fitted)}]},
                         {"label": "0-100%", "method": "relayout",
                          "args": [{"yaxis.range": [0, 100]}]}]}]


def _with_gaps(points: Sequence[tuple[date, float]],
               interval: str) -> tuple[list[str], list[float | None]]:
    """x and y of one line, broken where periods have no data: a line drawn straight across
    three empty weeks claims values nobody measured."""
    step = timedelta(days=7 if interval == "week" else 1)
    xs: list[str] = []
    ys: list[float | None] = []
    ordered = sorted(points)
    for index, (period, value) in enumerate(ordered):
        if index and period - ordered[index - 1][0] > step:
            xs.append((period - step).isoformat())
            ys.append(None)
        xs.append(period.isoformat())
        ys.append(value)
    return xs, ys


def _trend_trace(group: str, points: Sequence[tuple[date, float]], colour: str,
                 interval: str, days: DateRange | None) -> dict[str, Any]:
    """One group's line; a week the range covers only in part is an open marker whose hover
    says how many days it holds."""
    x, y = _with_gaps(points, interval)
    partial = [partial_days(date.fromisoformat(p), interval, days) for p in x]
    labels = [period_label(date.fromisoformat(p), interval)
              + (f" (partial: {n} of 7 days in the range)" if n else "")
              for p, n in zip(x, partial, strict=True)]
    return {"type": "scatter", "name": hover_text(group), "legendgroup": hover_text(group),
            "x": x, "y": y, "customdata": labels, "mode": "lines+markers",
            "line": {"color": colour}, "connectgaps": False,
            "marker": {"symbol": ["circle-open" if n else "circle" for n in partial],
                       "size": [9 if n else 6 for n in partial]},
            "hovertemplate": "%{customdata}: %{y:.2f}%<extra>" + hover_text(group) + "</extra>"}


def _reference_band(level: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A light band of ±``BAND_PTS`` around the range's own ETT%, and its label: the
    periods outside it are the ones that moved."""
    shapes = [{"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
               "y0": level - BAND_PTS, "y1": level + BAND_PTS, "fillcolor": BAND_COLOUR,
               "opacity": 0.08, "line": {"width": 0}, "layer": "below"},
              {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": level,
               "y1": level, "line": {"color": BAND_COLOUR, "width": 1, "dash": "dot"},
               "layer": "below"}]
    notes = [{"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": level + BAND_PTS,
              "yanchor": "bottom", "showarrow": False, "font": {"size": 10, "color": BAND_COLOUR},
              "text": f"whole range {level:.2f}% ± {BAND_PTS:g} pt"}]
    return shapes, notes


def ett_trend(series: Mapping[str, Sequence[tuple[date, float]]], interval: str,
              markers: Sequence[RolloutMarker] = (), previous: PreviousPeriod | None = None,
              filters: Mapping[str, str] | None = None, days: DateRange | None = None,
              reference: float | None = None) -> Figure:
    """ETT% per day or week, one line per group (GPU-weighted within each point), with a
    lane of rollout markers per component above it and, when given, the previous period
    dashed beneath. ``filters`` travel with a marker cluster's link to the rollouts list.

    The y axis fits the data (a toggle restores 0-100), around a light band at
    ``reference`` (the whole range's ETT%); lines break where periods have no data; with
    ``days``, weeks the range covers in part are marked and the axis outside it shaded.
    """
    groups = list(dict.fromkeys([*series, *(previous.series if previous else {})]))
    colours = {g: GROUP_COLOURS[i % len(GROUP_COLOURS)] for i, g in enumerate(groups)}
    traces = [_trend_trace(group, points, colours[group], interval, days)
              for group, points in series.items()]
    periods = [p.isoformat() for points in series.values() for p, _ in points]
    values = [v for points in series.values() for _, v in points]
    if previous is not None:  # the axis spans the shifted points too, so none is cut off
        traces += _previous_traces(previous, colours, interval)
        periods += [(p + previous.shift).isoformat() for points in previous.series.values()
                    for p, _ in points]
        values += [v for points in previous.series.values() for _, v in points]
    shapes, notes = _reference_band(reference) if reference is not None else ([], [])
    fitted = fitted_percent_range(
        values + ([reference - BAND_PTS, reference + BAND_PTS] if reference is not None else []))
    layout = base_layout(
        height=340, yaxis={"title": title("ETT%"), "range": fitted},
        xaxis={"title": title(f"{interval} (UTC)")}, legend={"title": title("group")},
        updatemenus=percent_scale_menu(fitted))
    if shapes:
        layout.update(shapes=shapes, annotations=notes)
    fig = {"data": traces, "layout": layout}
    with_rollout_lanes(fig, periods, interval, markers, filters)
    if days is not None and interval == "week":
        shade_outside_range(fig, days)
    return fig


def component_lost_chart(points: Sequence[tuple[date, float]], component: str, interval: str,
                         markers: Sequence[RolloutMarker] = (),
                         filters: Mapping[str, str] | None = None,
                         days: DateRange | None = None) -> Figure:
    """One component's lost GPU-hours per day or week, its rollouts in a lane above; with
    ``days``, a weekly axis shades what lies outside the range."""
    x = [p.isoformat() for p, _ in points]
    bar = {"type": "bar", "name": "lost GPU-hours", "x": x, "y": [v for _, v in points],
           "marker": {"color": colour_of(component)},
           "hovertemplate": "%{x}: %{y:.2f} GPU-hours<extra></extra>"}
    fig = {"data": [bar], "layout": base_layout(
        height=300, yaxis={"title": title("lost GPU-hours"), "rangemode": "tozero"},
        xaxis={"title": title(f"{interval} (UTC)")}, showlegend=False)}
    with_rollout_lanes(fig, x, interval, markers, filters)
    if days is not None and interval == "week":
        shade_outside_range(fig, days)
    return fig


def component_share_chart(points: Sequence[tuple[date, float]], component: str, interval: str,
                          markers: Sequence[RolloutMarker] = (),
                          filters: Mapping[str, str] | None = None,
                          days: DateRange | None = None) -> Figure:
    """One component's lost share: points of the fleet's wall time per day or week (a
    growing fleet does not look worse), its rollouts in a lane above; broken where no
    period has data and, with ``days``, partial weeks marked as on the fleet trend."""
    line = {**_trend_trace("lost share", points, colour_of(component), interval, days),
            "hovertemplate": "%{customdata}: %{y:.2f} pts of wall time<extra></extra>"}
    fig = {"data": [line], "layout": base_layout(
        height=300, yaxis={"title": title("pts of fleet wall time"), "rangemode": "tozero"},
        xaxis={"title": title(f"{interval} (UTC)")}, showlegend=False)}
    with_rollout_lanes(fig, [p.isoformat() for p, _ in points], interval, markers, filters)
    if days is not None and interval == "week":
        shade_outside_range(fig, days)
    return fig
