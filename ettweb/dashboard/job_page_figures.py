"""Plotly figures of one job's page, built from its stored rows (``ettweb.queries.job_detail``).

The page draws what the rollup refresh stored: each attempt's category timeline (the phase
timeline, a bar per piece coloured by category), its rank lanes, the lost-time waterfall and
the recoveries' parts. Nothing here reads events. Every category keeps its one colour
(``ettweb.platform.colours``); text that reaches plotly's hover labels (which render HTML) is
escaped, though phase names and rank sets are plain by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any, Final

import plotly.graph_objects as go

from ettweb.attribution.components import PRODUCTIVE
from ettweb.attribution.engine import Segment
from ettweb.attribution.lanes import TRAIN
from ettweb.pages.figures import (
    LAYOUT,
    MARGIN,
    Figure,
    Unit,
    base_layout,
    title,
    to_fragment,
    unit_for,
)
from ettweb.platform.colours import category_order, colour_of
from ettweb.queries.job_detail import JobHeadline, JobResult, LaneRow, RecoveryRow, TimelineRow

#: Lanes one attempt's figure draws; the API and the stored rows keep every lane.
MAX_DRAWN_LANES: Final = 64
LANE_PX: Final = 22
#: Rank sets longer than this are cut in the axis label (the hover has the whole set).
RANKS_LABEL_CHARS: Final = 24
#: U+2212, as the pages write a negative change (``ett_format.MINUS``).
MINUS: Final = "\u2212"
#: The wall bar of the waterfall: not a category, so not one of the category colours.
WALL_COLOUR: Final = "#34404c"


def unit_of(headline: JobHeadline) -> Unit:
    """One time unit for every time axis of the page: the job's wall time decides."""
    return unit_for(headline.wall_s)


def _piece_order(category: str) -> tuple[int, str]:
    """Repeated steps first: a restarted train span re-does old steps before new ones (§3.8)."""
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
    legend lists ``productive`` first (see :func:`ettweb.platform.colours.category_order`).
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
        xaxis={"title": title(f"{unit.name} since the job started")},
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1]}, legend=legend)}


def category_timeline(rows: Sequence[TimelineRow], job_start: float) -> Figure:
    """The stored timeline drawn as the phase timeline: one row per attempt, a bar per
    piece coloured by category (the restart gap on the row of the attempt after it)."""
    segments = [Segment(start, end, row.attempt, 0, {category: end - start})
                for row in rows for category, start, end in row.pieces if end > start]
    return phase_timeline(segments, job_start)


def _state_colour(state: str) -> str:
    """A lane's ``train`` has productive's colour; a phase has its category's."""
    return colour_of(PRODUCTIVE if state == TRAIN else state)


def _ranks_word(ranks: str) -> str:
    """``rank 3`` for one rank, ``ranks 0-127, 130`` for a set."""
    return "rank" if ranks.isdigit() else "ranks"


def _ranks_tick(ranks: str) -> str:
    short = ranks if len(ranks) <= RANKS_LABEL_CHARS else ranks[:RANKS_LABEL_CHARS - 1] + "…"
    return escape(f"{_ranks_word(ranks)} {short}")


def rank_lanes(lanes: Sequence[LaneRow], job_start: float, unit: Unit,
               window: tuple[float, float] | None = None) -> dict[str, Any]:
    """One attempt's rank lanes, one plotly row per lane (ranks that agreed throughout).

    The x axis is the category timeline's clock (``unit`` since the job started), shown
    over the attempt's ``window`` so a lane reads against its attempt's row above. Rows
    are numbers with escaped tick text: a lane label is never a plotly category, and two
    long labels cut alike cannot collide.

    Returned as plain figure JSON, not a ``go.Figure``: a page draws up to 24 of these, and
    building them through plotly's validating objects was 70% of a long job's page time
    (measured 2026-12-01); tests validate the JSON with ``go.Figure`` instead.
    """
    drawn = list(lanes[:MAX_DRAWN_LANES])
    by_state: dict[str, dict[str, list[Any]]] = {}
    for row, lane in enumerate(drawn):
        who = escape(f"{_ranks_word(lane.ranks)} {lane.ranks} ({lane.rank_count})")
        for state, start, end in lane.runs:
            bars = by_state.setdefault(state, {"y": [], "base": [], "x": [], "who": []})
            bars["y"].append(row)
            bars["base"].append((start - job_start) / unit.seconds)
            bars["x"].append((end - start) / unit.seconds)
            bars["who"].append(who)
    traces = [
        {"type": "bar", "name": escape(state), "orientation": "h", "y": bars["y"],
         "base": bars["base"], "x": bars["x"], "customdata": bars["who"],
         "marker": {"color": _state_colour(state)},
         "hovertemplate": (f"{escape(state)}<br>from %{{base:.2f}} for %{{x:.2f}} "
                           f"{unit.name}<extra>%{{customdata}}</extra>")}
        for state, bars in sorted(by_state.items(),
                                  key=lambda kv: category_order(PRODUCTIVE if kv[0] == TRAIN
                                                                else kv[0]))]
    legend, legend_px = category_legend(len(by_state))
    legend["title"] = {"text": "ranks were in"}
    xaxis: dict[str, Any] = {"title": {"text": f"{unit.name} since the job started"}}
    if window is not None and window[1] > window[0]:
        xaxis["range"] = [(window[0] - job_start) / unit.seconds,
                          (window[1] - job_start) / unit.seconds]
    layout = {**LAYOUT, "margin": {**MARGIN, "t": 10, "b": MARGIN["b"] + legend_px},
              "barmode": "overlay", "bargap": 0.25,
              "height": 70 + LANE_PX * max(len(drawn), 1) + legend_px,
              "xaxis": xaxis, "legend": legend,
              "yaxis": {"tickvals": list(range(len(drawn))),
                        "ticktext": [_ranks_tick(lane.ranks) for lane in drawn],
                        "range": [len(drawn) - 0.5, -0.5], "fixedrange": True,
                        "zeroline": False, "showgrid": False}}
    return {"data": traces, "layout": layout}


def lost_waterfall(headline: JobHeadline) -> go.Figure:
    """Wall time, minus each lost category (largest first), equals productive time.

    A plotly waterfall trace has one colour per direction, not per bar, so each step is its
    own one-bar trace starting where the previous one ended: every category keeps its fixed
    colour, and its legend entry names it.
    """
    unit = unit_of(headline)
    lost = sorted(((c, s) for c, s in headline.lost_s.items() if s > 0),
                  key=lambda kv: (-kv[1], kv[0]))
    order = ["wall", *(escape(c) for c, _ in lost), PRODUCTIVE]

    def share(seconds: float) -> str:
        return f"{100 * seconds / headline.wall_s:.1f}% of wall" if headline.wall_s else ""

    traces = [go.Waterfall(
        name="wall", orientation="h", measure=["absolute"], y=["wall"],
        x=[headline.wall_s / unit.seconds], totals={"marker": {"color": WALL_COLOUR}},
        hovertemplate=f"wall: %{{x:.2f}} {unit.name}<extra></extra>")]
    remaining = headline.wall_s
    for category, seconds in lost:
        name = escape(category)
        traces.append(go.Waterfall(
            name=name, orientation="h", measure=["relative"], y=[name],
            x=[-seconds / unit.seconds], base=remaining / unit.seconds,
            decreasing={"marker": {"color": colour_of(category)}},
            connector={"visible": False}, customdata=[share(seconds)],
            hovertemplate=(f"{name}: {MINUS}{seconds / unit.seconds:.2f} {unit.name}"
                           "<br>%{customdata}<extra></extra>")))
        remaining -= seconds
    traces.append(go.Waterfall(
        name=PRODUCTIVE, orientation="h", measure=["absolute"], y=[PRODUCTIVE],
        x=[headline.productive_s / unit.seconds],
        totals={"marker": {"color": colour_of(PRODUCTIVE)}}, customdata=[
            share(headline.productive_s)],
        hovertemplate=f"productive: %{{x:.2f}} {unit.name}<br>%{{customdata}}<extra></extra>"))
    fig = go.Figure(traces)
    fig.update_layout(**LAYOUT, waterfallmode="overlay", showlegend=False,
                      height=90 + 26 * len(order), xaxis_title=f"time ({unit.name})",
                      yaxis={"categoryorder": "array", "categoryarray": order,
                             "autorange": "reversed"})
    return fig


def recovery_bars(recoveries: Sequence[RecoveryRow]) -> go.Figure:
    """Each restart's time to recover as one horizontal bar, stacked by what it went to
    (failure tail, restart gap, init phases, repeated training ...)."""
    unit = unit_for(max((r.seconds for r in recoveries), default=0.0))
    rows = [f"after attempt {r.attempt}" for r in recoveries]
    categories = sorted({c for r in recoveries for c, s in r.by_category.items() if s > 0},
                        key=category_order)
    fig = go.Figure([
        go.Bar(name=escape(category), orientation="h", y=rows,
               x=[r.by_category.get(category, 0.0) / unit.seconds for r in recoveries],
               marker_color=colour_of(category),
               hovertemplate=(f"{escape(category)}: %{{x:.2f}} {unit.name}"
                              "<extra>%{y}</extra>"))
        for category in categories])
    legend, legend_px = category_legend(len(categories))
    fig.update_layout(**{**LAYOUT, "margin": {**MARGIN, "b": MARGIN["b"] + legend_px}},
                      barmode="stack", height=90 + 30 * max(len(rows), 1) + legend_px,
                      xaxis_title=f"time to recover ({unit.name})", legend=legend,
                      yaxis={"categoryorder": "array", "categoryarray": rows,
                             "autorange": "reversed"})
    return fig


#: An attempt with more lanes than this starts with its lanes folded away.
OPEN_LANES_UP_TO: Final = 8
#: Only the latest attempts start open: a job of 24 restarts was 11,000 px of lanes tall.
OPEN_ATTEMPTS: Final = 3
#: Attempts whose lanes the page draws, the latest ones: a job in a crash loop of hundreds
#: of attempts still loads quickly (the API lists every attempt's lanes).
MAX_LANE_ATTEMPTS: Final = 24


def page_charts(result: JobResult) -> dict[str, Any]:
    """Every figure of the job page as an HTML fragment; ``lanes`` holds one entry per
    attempt that has lanes in the chunk shown (the latest ``MAX_LANE_ATTEMPTS``): its
    number, lane and rank counts, the stretch drawn (``from``/``to``), whether it starts
    open; ``earlier_lanes`` counts the attempts left out."""
    h = result.headline
    unit, start = unit_of(h), result.job_start
    charts: dict[str, Any] = {
        "timeline": to_fragment(category_timeline(result.timeline, start), "phase-timeline"),
        "waterfall": to_fragment(lost_waterfall(h), "lost-waterfall") if h.wall_s else "",
        "recoveries": (to_fragment(recovery_bars(h.recoveries), "recovery-parts")
                       if h.recoveries else ""),
        "lanes": [],
    }
    with_lanes = [a for a in h.attempts if result.lanes_of(a.attempt)]
    charts["earlier_lanes"] = max(0, len(with_lanes) - MAX_LANE_ATTEMPTS)
    drawn = with_lanes[-MAX_LANE_ATTEMPTS:]
    for index, attempt in enumerate(drawn):
        lanes = result.lanes_of(attempt.attempt)
        latest = index >= len(drawn) - OPEN_ATTEMPTS
        charts["lanes"].append({
            "attempt": attempt.attempt, "lanes": len(lanes),
            "ranks": sum(lane.rank_count for lane in lanes),
            "open": latest and len(lanes) <= OPEN_LANES_UP_TO,
            "hidden": max(0, len(lanes) - MAX_DRAWN_LANES),
            "from": lanes[0].start, "to": lanes[0].end,
            "figure": to_fragment(rank_lanes(lanes, start, unit, (lanes[0].start, lanes[0].end)),
                                  f"lanes-{attempt.attempt}")})
    return charts
