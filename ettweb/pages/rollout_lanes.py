"""Rollout markers on a time figure: a strip of lanes above its plot, one per component,
with close rollouts merged into numbered clusters, and links to the rollout or the list.

Why lanes on their own axis: markers never hide data, and a lane's label (the component)
reads like an axis label. Why clusters: fifty rollouts in a month stay readable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from ettweb.pages.figures import HOVER_CHARS, MARGIN, Figure, hover_text
from ettweb.pages.time_axis import period_axis, plotly_time
from ettweb.platform.colours import colour_of, ink_on
from ettweb.queries.markers import RolloutMarker

#: Most markers one lane shows across the visible range: closer rollouts merge into a cluster,
#: so fifty rollouts in a month stay readable (a marker is ~1/24 of the plot width apart).
MAX_MARKERS_PER_LANE = 24
#: Names a cluster's hover lists before "and N more".
CLUSTER_NAMES_SHOWN = 10
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


def marker_hover(cluster: MarkerCluster) -> str:
    """Hover text (HTML, every user-provided part escaped): one rollout, or a cluster's
    count and names (at most ``CLUSTER_NAMES_SHOWN``, then "and N more")."""
    if cluster.count == 1:
        m = cluster.markers[0]
        lines = [f"<b>{hover_text(m.name)}</b>",
                 f"{hover_text(m.component)} · {m.at:%Y-%m-%d %H:%M} UTC",
                 f"scope: {hover_text(m.scope)}"]
        if m.link:  # http(s) only: ``RolloutMarker.link`` is checked by the markers query
            lines.append(hover_text(m.link, 2 * HOVER_CHARS))
        return "<br>".join([*lines, "<i>click to open the rollout</i>"])
    names = [f"• {hover_text(m.name)} ({m.at:%m-%d})"
             for m in cluster.markers[:CLUSTER_NAMES_SHOWN]]
    if cluster.count > CLUSTER_NAMES_SHOWN:
        names.append(f"and {cluster.count - CLUSTER_NAMES_SHOWN} more")
    days = f"{cluster.first:%Y-%m-%d}"
    if cluster.last.date() != cluster.first.date():
        days += f" to {cluster.last:%Y-%m-%d}"
    head = [f"<b>{cluster.count} rollouts</b> · {hover_text(cluster.component)}", days]
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
        "type": "scatter", "name": f"rollouts · {hover_text(component)}", "meta": "rollouts",
        "yaxis": axis, "showlegend": False, "x": [plotly_time(c.at) for c in lane],
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
                      "x0": plotly_time(c.first), "x1": plotly_time(c.last)}
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
        "ticktext": [hover_text(n, 32) for n in names], "showgrid": False, "zeroline": False,
        "ticks": "", "title": {"text": ""}}
    fig["data"] = [*fig["data"], *(_lane_trace(index, name, lanes[name], axis, filters)
                                   for index, name in enumerate(names))]


def with_rollout_lanes(fig: Figure, periods: Sequence[str], interval: str,
                       markers: Sequence[RolloutMarker],
                       filters: Mapping[str, str] | None = None) -> None:
    """Set the period axis (widened to the markers) and draw the marker lanes on it."""
    bounds = period_axis(fig, periods, interval, [m.at for m in markers])
    if bounds is not None and markers:
        span_s = (bounds[1] - bounds[0]).total_seconds()
        add_rollout_lanes(fig, cluster_markers(markers, span_s), filters=filters)
