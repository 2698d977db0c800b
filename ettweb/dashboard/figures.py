"""Plotly figures for the dashboard pages — view layer only.

Queries return plain numbers; only views call these builders, so a future JSON API or an
export can reuse the queries without dragging plotly along. Every figure is rendered as an
HTML fragment without plotly.js: the page loads our own static copy (no CDN).

Built as plain figure JSON (plotly's own schema: ``data`` traces and a ``layout``), not as
``go.Figure`` objects: validating the objects (property setters, validators, deep copies)
was a large share of a fleet page's server time, for a figure that renders the same.
``tests/ettweb/dashboard/test_dashboard_figures_schema.py`` validates each against plotly's
schema instead, once per test run.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import plotly.io as pio
from django.urls import reverse
from plotly.colors import qualitative

from ettweb.attribution.engine import Segment
from ettweb.colours import category_order, colour_of, ink_on
from ettweb.queries.base import ALL, DateRange
from ettweb.queries.markers import RolloutMarker

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: A figure as plotly's JSON: ``{"data": [traces], "layout": {...}}``.
Figure = dict[str, Any]

MARGIN = {"l": 10, "r": 10, "t": 30, "b": 40}
#: No ``template`` here: ``to_fragment`` adds it as plain JSON. Why: assigning a template
#: makes plotly validate the whole of it on every figure, a large share of a page's server
#: time; a figure rendered with the same template JSON is identical.
LAYOUT = {"margin": MARGIN, "font": {"family": "system-ui, sans-serif", "size": 12}}
TEMPLATE = "plotly_white"


def base_layout(**extra: Any) -> dict[str, Any]:
    """The common layout with this figure's own settings (a fresh dict: callers amend it)."""
    return {**LAYOUT, **extra}


def _title(text: str) -> dict[str, str]:
    """A title as plotly itself writes one (``title.text``): the plain JSON stays exactly what
    a validated ``go.Figure`` would give the page."""
    return {"text": text}


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


@functools.cache
def _template_json() -> dict[str, Any]:
    """The page template as plain JSON, built once per process."""
    return dict(pio.templates[TEMPLATE].to_plotly_json())


def to_fragment(fig: go.Figure | Mapping[str, Any], div_id: str) -> str:
    """Figure as an embeddable ``<div>`` and its JSON; ``static/ett/ett.js`` draws it.

    No inline script: the Content-Security-Policy allows scripts only from our static
    files, so the figure travels as a ``<script type="application/json">`` block (data, not
    code; ``<`` and ``>`` are escaped, so no string in it can close the block) naming its
    div. A ``go.Figure`` (the job page's waterfall and recoveries) was validated as it was
    built; plain figure JSON (every other figure, validated in its tests) is taken as it
    is. Either gets the template and is rendered without validating again (see ``LAYOUT``).
    The outer div has the figure's own height, as plotly's ``to_html`` gives it, so the
    page does not jump while it draws.
    """
    # A go.Figure's JSON holds plotly's default template: replaced by ours.
    data: dict[str, Any] = dict(fig) if isinstance(fig, Mapping) else fig.to_plotly_json()
    layout: dict[str, Any] = dict(data.get("layout") or {})
    layout["template"] = _template_json()
    figure = {"data": list(data.get("data", [])), "layout": layout,
              "config": {"displaylogo": False, "responsive": True}}
    payload = str(pio.json.to_json_plotly(figure)).replace("<", "\\u003c").replace(">", "\\u003e")
    height = f"{layout['height']}px" if isinstance(layout.get("height"), int | float) else "100%"
    width = f"{layout['width']}px" if isinstance(layout.get("width"), int | float) else "100%"
    target = escape(div_id)
    return (f'<div style="height:{height}; width:{width};">'
            f'<div id="{target}" class="plotly-graph-div" style="height:100%; width:100%;"></div>'
            f'<script type="application/json" class="ett-figure" data-target="{target}">'
            f'{payload}</script></div>')


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
        barmode="stack", height=360, yaxis={"title": _title(f"lost time ({unit.name})")},
        legend={"title": _title("component")})}


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


#: Legend entries a row holds at the page's width (about six fit 1,100 px): the timeline
#: grows by a row of height for every this many categories, so its plot keeps its size.
LEGEND_PER_ROW = 5
LEGEND_ROW_PX = 22


def category_legend(count: int) -> tuple[dict[str, Any], int]:
    """A horizontal legend under the plot, in trace order, and the pixels it needs.

    Why: a vertical legend beside a short timeline showed five of sixteen categories and
    scrolled, ``productive`` among the hidden ones. Anchored to the figure's bottom edge
    (``yref="container"``) it pushes the plot up instead of overlapping the axis title, and
    ``maxheight=1`` (the whole figure) lets it wrap onto more rows rather than scroll.
    """
    rows = max(1, math.ceil(count / LEGEND_PER_ROW))
    legend = {"orientation": "h", "traceorder": "normal", "x": 0, "xanchor": "left",
              "yref": "container", "y": 0, "yanchor": "bottom", "maxheight": 1,
              "title": {"text": "category"}}
    return legend, rows * LEGEND_ROW_PX + 10


def phase_timeline(segments: Sequence[Segment], job_start: float) -> Figure:
    """Horizontal bars per segment, one row per attempt, coloured by category.

    Restart gaps show as grey bars (or blank space when a gap was not attributed). The
    legend lists ``productive`` first (see :func:`ettweb.colours.category_order`).
    """
    unit = unit_for(max((s.end for s in segments), default=job_start) - job_start)
    by_category: dict[str, list[tuple[str, float, float]]] = {}
    for segment in segments:
        row = f"attempt {segment.attempt}"
        for category, start, seconds in _pieces(segment):
            _append_merged(by_category.setdefault(category, []), row,
                           (start - job_start) / unit.seconds, seconds / unit.seconds)
    bars = [{"type": "bar", "name": category, "orientation": "h", "y": [p[0] for p in pieces],
             "base": [p[1] for p in pieces], "x": [p[2] for p in pieces],
             "marker": {"color": colour_of(category)},
             "hovertemplate": (f"{category}<br>from %{{base:.2f}} for %{{x:.2f}} {unit.name}"
                               "<extra>%{y}</extra>")}
            for category, pieces in sorted(by_category.items(),
                                           key=lambda kv: category_order(kv[0]))]
    rows = sorted({f"attempt {s.attempt}" for s in segments}, key=lambda r: int(r.split()[1]))
    legend, legend_px = category_legend(len(by_category))
    return {"data": bars, "layout": base_layout(
        margin={**MARGIN, "b": MARGIN["b"] + legend_px}, barmode="overlay",
        height=120 + 40 * len(rows) + legend_px,
        xaxis={"title": _title(f"{unit.name} since the job started")},
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1]}, legend=legend)}


DAY_MS = 86_400_000
#: ISO weeks start on Monday; plotly's own week periods and ticks would start on Sunday.
MONDAY = "2000-01-03"
#: Room at each end of a time axis, as a share of its span: edge markers stay whole.
EDGE_PAD = 0.02


def _period_axis(fig: Figure, periods: Sequence[str], interval: str = "day",
                 moments: Sequence[datetime] = ()) -> tuple[datetime, datetime] | None:
    """Days (or weeks) on the x axis as whole periods: with one or two points plotly would
    otherwise zoom into milliseconds around them and label ticks 23:59:59.999.

    Each point stands for its whole UTC day or ISO week, so it is drawn in the middle of
    that period and tick labels sit under the period they name: a rollout at 09:00 then
    falls inside its day's bar, not after it. ``moments`` (rollout times) widen the range
    so every marker is on the chart; the range is returned because marker clustering is
    relative to what is visible. Sets ``fig``'s x axis and its traces so far in place.
    """
    days = sorted({date.fromisoformat(p) for p in periods})
    layout = fig["layout"]
    xaxis = {**layout.get("xaxis", {}), "type": "date", "tickformat": "%b %d",
             "hoverformat": "%Y-%m-%d", "ticklabelmode": "period"}
    layout["xaxis"] = xaxis
    if not days:
        return None
    week = interval == "week"
    period_ms = (7 if week else 1) * DAY_MS
    period: dict[str, Any] = {"xperiod": period_ms, "xperiodalignment": "middle"}
    if week:
        period["xperiod0"] = MONDAY
    # Bars on a date axis are as wide as their data says: one bar would be a hairline.
    fig["data"] = [{**trace, **period, **({"width": 0.8 * period_ms}
                                          if trace["type"] == "bar" else {})}
                   for trace in fig["data"]]
    low = min([_midnight(days[0]), *moments])
    high = max([_midnight(days[-1]) + timedelta(milliseconds=period_ms), *moments])
    pad = (high - low) * EDGE_PAD
    low, high = low - pad, high + pad
    xaxis["range"] = [_plotly_time(low), _plotly_time(high)]
    if (high - low) <= timedelta(milliseconds=31 * period_ms):
        xaxis["dtick"] = period_ms
        if week:
            xaxis["tick0"] = MONDAY
    return low, high


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _plotly_time(moment: datetime) -> str:
    """UTC wall-clock text: plotly.js reads no time-zone offsets, so none is written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


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


def _period_label(period: date, interval: str) -> str:
    """What a point stands for, in the hover: a day, or the ISO week from its Monday."""
    if interval == "week":
        return f"week of {period.isoformat()}"
    return period.isoformat()


def _previous_traces(previous: PreviousPeriod, colours: Mapping[str, str],
                     interval: str) -> list[dict[str, Any]]:
    """Dashed lines of the previous period, at the shifted positions; the hover names the
    actual day or week (``customdata``), never the shifted one."""
    traces = []
    for group, points in previous.series.items():
        label = "previous period" if group == ALL else f"{_text(group)} (previous)"
        traces.append({
            "type": "scatter", "name": label, "legendgroup": _text(group), "meta": "previous",
            "x": [(p + previous.shift).isoformat() for p, _ in points],
            "y": [v for _, v in points],
            "customdata": [_period_label(p, interval) for p, _ in points],
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
OUTSIDE_COLOUR = "#9aa3ad"


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


def partial_days(period: date, interval: str, days: DateRange | None) -> int | None:
    """How many of a week's 7 days the range covers, when it does not cover all of them
    (None: a whole period, or a day)."""
    if interval != "week" or days is None:
        return None
    covered = sum(1 for offset in range(7)
                  if days.date_from <= period + timedelta(days=offset) <= days.date_to)
    return covered if covered < 7 else None


def _trend_trace(group: str, points: Sequence[tuple[date, float]], colour: str,
                 interval: str, days: DateRange | None) -> dict[str, Any]:
    """One group's line; a week the range covers only in part is an open marker whose hover
    says how many days it holds."""
    x, y = _with_gaps(points, interval)
    partial = [partial_days(date.fromisoformat(p), interval, days) for p in x]
    labels = [_period_label(date.fromisoformat(p), interval)
              + (f" (partial: {n} of 7 days in the range)" if n else "")
              for p, n in zip(x, partial, strict=True)]
    return {"type": "scatter", "name": _text(group), "legendgroup": _text(group),
            "x": x, "y": y, "customdata": labels, "mode": "lines+markers",
            "line": {"color": colour}, "connectgaps": False,
            "marker": {"symbol": ["circle-open" if n else "circle" for n in partial],
                       "size": [9 if n else 6 for n in partial]},
            "hovertemplate": "%{customdata}: %{y:.2f}%<extra>" + _text(group) + "</extra>"}


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


def _outside_range(fig: Figure, days: DateRange) -> None:
    """Shade the parts of a weekly axis that lie outside the range (its first and last weeks
    run past it), so a partial week is not read as a whole one."""
    xaxis = fig["layout"].get("xaxis", {})
    if "range" not in xaxis:
        return
    low, high = xaxis["range"]
    start = _plotly_time(_midnight(days.date_from))
    end = _plotly_time(_midnight(days.date_to) + timedelta(days=1))
    shades = [(low, start)] if low < start else []
    shades += [(end, high)] if end < high else []
    fig["layout"]["shapes"] = [*fig["layout"].get("shapes", []), *(
        {"type": "rect", "xref": "x", "x0": x0, "x1": x1, "yref": "paper", "y0": 0, "y1": 1,
         "fillcolor": OUTSIDE_COLOUR, "opacity": 0.15, "line": {"width": 0}, "layer": "below"}
        for x0, x1 in shades)]


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
        height=340, yaxis={"title": _title("ETT%"), "range": fitted},
        xaxis={"title": _title(f"{interval} (UTC)")}, legend={"title": _title("group")},
        updatemenus=percent_scale_menu(fitted))
    if shapes:
        layout.update(shapes=shapes, annotations=notes)
    fig = {"data": traces, "layout": layout}
    _with_markers(fig, periods, interval, markers, filters)
    if days is not None and interval == "week":
        _outside_range(fig, days)
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
        height=300, yaxis={"title": _title("lost GPU-hours"), "rangemode": "tozero"},
        xaxis={"title": _title(f"{interval} (UTC)")}, showlegend=False)}
    _with_markers(fig, x, interval, markers, filters)
    if days is not None and interval == "week":
        _outside_range(fig, days)
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
        height=300, yaxis={"title": _title("pts of fleet wall time"), "rangemode": "tozero"},
        xaxis={"title": _title(f"{interval} (UTC)")}, showlegend=False)}
    _with_markers(fig, [p.isoformat() for p, _ in points], interval, markers, filters)
    if days is not None and interval == "week":
        _outside_range(fig, days)
    return fig


#: Lines a lost-share chart draws; the rest are in the table below it.
SHARE_LINES = 8


def lost_share_lines(periods: Sequence[date], shares: Mapping[str, Sequence[float]],
                     interval: str) -> Figure:
    """Each component's lost share (points of the period's wall time) per day or week, the
    largest losers first (``shares`` comes ordered so): which component's loss grew or
    shrank over the range, without a growing fleet looking worse."""
    x = [p.isoformat() for p in periods]
    traces = [{"type": "scatter", "name": _text(name), "x": x, "y": list(values),
               "mode": "lines", "line": {"color": colour_of(name), "width": 2},
               "hovertemplate": "%{x}: %{y:.2f} pts<extra>" + _text(name) + "</extra>"}
              for name, values in list(shares.items())[:SHARE_LINES]]
    # The legend below the plot: at a phone's width a legend beside it leaves no plot.
    fig = {"data": traces, "layout": base_layout(
        height=380, yaxis={"title": _title("lost share (pts of wall time)"),
                           "rangemode": "tozero"},
        xaxis={"title": _title(f"{interval} (UTC)")},
        legend={"orientation": "h", "yanchor": "top", "y": -0.22})}
    _period_axis(fig, x, interval)
    return fig


def lost_gpu_hours_bar(gpu_hours: Mapping[str, float]) -> Figure:
    """The fleet's lost GPU-hours per owning component, largest first."""
    items = sorted(((c, h) for c, h in gpu_hours.items() if h > 0), key=lambda kv: -kv[1])
    names = [c for c, _ in items]
    bar = {"type": "bar", "x": [h for _, h in items], "y": names, "orientation": "h",
           "marker": {"color": [colour_of(c) for c in names]},
           "hovertemplate": "%{y}: %{x:.2f} GPU-hours<extra></extra>"}
    return {"data": [bar], "layout": base_layout(
        height=80 + 28 * max(len(items), 1), xaxis={"title": _title("lost GPU-hours")},
        yaxis={"autorange": "reversed"})}


def lost_over_time_stacked(periods: Sequence[date], gpu_hours: Mapping[str, Sequence[float]],
                           interval: str = "day") -> Figure:
    """Lost GPU-hours per period, stacked by owning component (the largest loser at the
    bottom, as ``gpu_hours`` is ordered)."""
    x = [p.isoformat() for p in periods]
    bars = [{"type": "bar", "name": component, "x": x, "y": list(values),
             "marker": {"color": colour_of(component)},
             "hovertemplate": ("%{x}: %{y:.2f} GPU-hours<extra>" + _text(component)
                               + "</extra>")}
            for component, values in gpu_hours.items()]
    fig = {"data": bars, "layout": base_layout(
        barmode="stack", height=340, yaxis={"title": _title("lost GPU-hours")},
        legend={"title": _title("component")})}
    _period_axis(fig, x, interval)
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
        barmode="stack", height=320, yaxis={"title": _title("GPU-hours")},
        legend={"title": _title("category")})}
    _period_axis(fig, x, interval)
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
        height=320, yaxis={"title": _title("mean minutes")},
        yaxis2={"title": _title("failures"), "overlaying": "y", "side": "right",
                **count_axis(max(failures, default=0))})}
    _period_axis(fig, x, interval)
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


# --------------------------------------------------------------------------- rollout markers

#: Most markers one lane shows across the visible range: closer rollouts merge into a cluster,
#: so fifty rollouts in a month stay readable (a marker is ~1/24 of the plot width apart).
MAX_MARKERS_PER_LANE = 24
#: Names a cluster's hover lists before "and N more".
CLUSTER_NAMES_SHOWN = 10
#: Longest name or scope shown in hover text (the page's table has the whole text).
HOVER_CHARS = 60
LANE_PX = 26
LANES_GAP_PX = 14
PLOT_MARGIN_PX = MARGIN["t"] + MARGIN["b"]


@dataclass(frozen=True)
class MarkerCluster:
    """One marker drawn in a component's lane: a rollout, or several close together."""

    component: str
    markers: tuple[RolloutMarker, ...]

    @property
    def count(self) -> int:
        return len(self.markers)

    @property
    def first(self) -> datetime:
        return self.markers[0].at

    @property
    def last(self) -> datetime:
        return self.markers[-1].at

    @property
    def at(self) -> datetime:
        """Where it is drawn: the middle of the rollouts it holds."""
        return self.first + (self.last - self.first) / 2


def cluster_markers(markers: Sequence[RolloutMarker], span_s: float,
                    max_per_lane: int = MAX_MARKERS_PER_LANE) -> dict[str, list[MarkerCluster]]:
    """Markers in one lane per component (lanes sorted by name), merged when close.

    A cluster starts at a rollout and takes every later one of its lane within
    ``span_s / max_per_lane`` of that start. Measured from the start, not chained from the
    previous rollout, so a cluster is never wider than the threshold and a lane of markers
    inside ``span_s`` holds at most ``max_per_lane`` of them, whatever the density.
    """
    lanes: dict[str, list[RolloutMarker]] = defaultdict(list)
    for marker in sorted(markers, key=lambda m: (m.at, m.id)):
        lanes[marker.component].append(marker)
    threshold = max(span_s, 0.0) / max_per_lane
    return {name: _merge(name, lane, threshold) for name, lane in sorted(lanes.items())}


def _merge(component: str, lane: Sequence[RolloutMarker],
           threshold_s: float) -> list[MarkerCluster]:
    groups: list[list[RolloutMarker]] = []
    for marker in lane:
        if groups and (marker.at - groups[-1][0].at).total_seconds() <= threshold_s:
            groups[-1].append(marker)
        else:
            groups.append([marker])
    return [MarkerCluster(component, tuple(group)) for group in groups]


def _text(value: str, limit: int = HOVER_CHARS) -> str:
    """User text made safe for plotly, which renders hover and tick text as HTML."""
    short = value if len(value) <= limit else value[:limit - 1] + "…"
    return escape(short, quote=True)


def marker_hover(cluster: MarkerCluster) -> str:
    """Hover text (HTML, every user-provided part escaped): one rollout, or a cluster's
    count and names (at most ``CLUSTER_NAMES_SHOWN``, then "and N more")."""
    if cluster.count == 1:
        m = cluster.markers[0]
        lines = [f"<b>{_text(m.name)}</b>", f"{_text(m.component)} · {m.at:%Y-%m-%d %H:%M} UTC",
                 f"scope: {_text(m.scope)}"]
        if m.link:  # http(s) only: ``RolloutMarker.link`` is checked by the markers query
            lines.append(_text(m.link, 2 * HOVER_CHARS))
        return "<br>".join([*lines, "<i>click to open the rollout</i>"])
    names = [f"• {_text(m.name)} ({m.at:%m-%d})" for m in cluster.markers[:CLUSTER_NAMES_SHOWN]]
    if cluster.count > CLUSTER_NAMES_SHOWN:
        names.append(f"and {cluster.count - CLUSTER_NAMES_SHOWN} more")
    days = f"{cluster.first:%Y-%m-%d}"
    if cluster.last.date() != cluster.first.date():
        days += f" to {cluster.last:%Y-%m-%d}"
    head = [f"<b>{cluster.count} rollouts</b> · {_text(cluster.component)}", days]
    return "<br>".join([*head, *names, "<i>click to list them</i>"])


def rollout_url(rollout_id: int) -> str:
    """The rollout's page: where a click on a single marker goes."""
    return reverse("rollouts:detail", args=[rollout_id])


def rollouts_list_url(component: str, first: date, last: date,
                      filters: Mapping[str, str] | None = None) -> str:
    """The rollouts list filtered to one component and a span of UTC days (a cluster's
    click, and the component page's "all rollouts" link), and to the rollouts that reach
    the page's jobs when ``filters`` (model, team, cluster) are given."""
    base = reverse("rollouts:list")
    query = {"component": component, "date_from": first.isoformat(),
             "date_to": last.isoformat(), **(filters or {})}
    return f"{base}?{urlencode(query)}"


def cluster_url(cluster: MarkerCluster, filters: Mapping[str, str] | None = None) -> str:
    """Where a click on the marker goes: the rollout, or the list of the cluster's ones."""
    if cluster.count == 1:
        return rollout_url(cluster.markers[0].id)
    first, last = cluster.first.astimezone(UTC).date(), cluster.last.astimezone(UTC).date()
    return rollouts_list_url(cluster.component, first, last, filters)


def _lane_trace(index: int, component: str, lane: Sequence[MarkerCluster],
                axis: str, filters: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One lane: diamonds for single rollouts, numbered circles for clusters."""
    single = [c.count == 1 for c in lane]
    colour = colour_of(component)
    return {
        "type": "scatter", "name": f"rollouts · {_text(component)}", "meta": "rollouts",
        "yaxis": axis, "showlegend": False, "x": [_plotly_time(c.at) for c in lane],
        "y": [index] * len(lane), "mode": "markers+text",
        "marker": {"symbol": ["diamond" if s else "circle" for s in single],
                   "size": [13 if s else 19 for s in single], "color": colour,
                   "line": {"color": "#ffffff", "width": 1}},
        "text": ["" if s else str(c.count) for s, c in zip(single, lane, strict=True)],
        "textposition": "middle center", "textfont": {"color": ink_on(colour), "size": 10},
        "hovertext": [marker_hover(c) for c in lane], "hoverinfo": "text",
        "hoverlabel": {"align": "left"}, "customdata": [cluster_url(c, filters) for c in lane],
    }


def _guides(lanes: Mapping[str, Sequence[MarkerCluster]]) -> list[dict[str, object]]:
    """Faint lines (a rollout) and bands (a cluster's span) down through the main plot, so a
    marker can be read against the day it hit."""
    shapes: list[dict[str, object]] = []
    for component, lane in lanes.items():
        colour = colour_of(component)
        for c in lane:
            common = {"xref": "x", "yref": "y domain", "y0": 0, "y1": 1, "layer": "below",
                      "x0": _plotly_time(c.first), "x1": _plotly_time(c.last)}
            if c.count == 1:
                shapes.append({**common, "type": "line", "opacity": 0.45,
                               "line": {"color": colour, "width": 1, "dash": "dot"}})
            else:
                shapes.append({**common, "type": "rect", "opacity": 0.12, "fillcolor": colour,
                               "line": {"width": 0}})
    return shapes


def add_rollout_lanes(fig: Figure, lanes: Mapping[str, Sequence[MarkerCluster]],
                      axis: str = "y2", filters: Mapping[str, str] | None = None) -> None:
    """A strip of lanes above the figure's plot, one per component, on its own y axis.

    Lanes sit on a separate axis domain (not on the plot) so markers never hide data and
    the lane label (the component) reads like an axis label. Lane positions are numbers with
    escaped tick text: a component name is user text and never becomes a plotly category.
    The figure grows by the strip's height; changed in place.
    """
    if not lanes:
        return
    names = list(lanes)
    lanes_px = LANE_PX * len(names) + LANES_GAP_PX
    layout = fig["layout"]
    height = int(layout.get("height") or 340) + lanes_px
    split = 1.0 - lanes_px / (height - PLOT_MARGIN_PX)
    layout["height"] = height
    layout["yaxis"] = {**layout.get("yaxis", {}), "domain": [0.0, split]}
    layout["shapes"] = [*layout.get("shapes", []), *_guides(lanes)]
    layout[f"yaxis{axis[1:]}"] = {
        "domain": [split + LANES_GAP_PX / (height - PLOT_MARGIN_PX), 1.0], "fixedrange": True,
        "range": [len(names) - 0.5, -0.5], "tickvals": list(range(len(names))),
        "ticktext": [_text(n, 32) for n in names], "showgrid": False, "zeroline": False,
        "ticks": "", "title": {"text": ""}}
    fig["data"] = [*fig["data"], *(_lane_trace(index, name, lanes[name], axis, filters)
                                   for index, name in enumerate(names))]


def _with_markers(fig: Figure, periods: Sequence[str], interval: str,
                  markers: Sequence[RolloutMarker],
                  filters: Mapping[str, str] | None = None) -> None:
    """Set the period axis (widened to the markers) and draw the marker lanes on it."""
    bounds = _period_axis(fig, periods, interval, [m.at for m in markers])
    if bounds is not None and markers:
        span_s = (bounds[1] - bounds[0]).total_seconds()
        add_rollout_lanes(fig, cluster_markers(markers, span_s), filters=filters)
