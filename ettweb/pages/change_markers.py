"""Detected changes marked on a time chart (the fleet's ETT% trend, a component's lost share).

Each change is a triangle along the top of the plot at the midnight its new level starts —
between the last day at the old level and the first at the new, since a chart draws each
day in the middle of its day — pointing the way the lost share moved, with a dashed line
down through the plot. Filled: no rollout explains it (unrecorded); hollow: a recorded
rollout does. Its hover says which component and team, the levels either side and the
rollout; a click opens the rollout, or, for an unrecorded change, its row on the changes
page, where an owner records the rollout.

The triangles sit on an axis of their own laid over the plot (0 to 1, hidden), so they stay
at the top whatever the chart's own scale: ETT% in percent, a lost share in points.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from html import escape
from typing import Any, Final
from urllib.parse import urlencode

from django.urls import reverse

from ettweb.platform.colours import colour_of
from ettweb.queries.changes import DetectedChange

#: The overlaid axis the marks use (the rollout lanes take ``y2``).
AXIS: Final = "y3"
#: Height of the marks on that axis: just under the top of the plot.
MARK_Y: Final = 0.965
#: Longest component or team name shown in a hover (user text; the page has it whole).
HOVER_CHARS: Final = 60
#: ``meta`` of the marks' trace and shapes, so tests and scripts can find them.
META: Final = "changes"


def mark_changes(fig: dict[str, Any], changes: Sequence[DetectedChange]) -> None:
    """Add ``changes`` to ``fig`` (plain figure JSON whose x axis is dates), in place."""
    if not changes:
        return
    layout = fig["layout"]
    layout[f"yaxis{AXIS[1:]}"] = {"overlaying": "y", "range": [0, 1], "visible": False,
                                  "fixedrange": True}
    layout["shapes"] = [*layout.get("shapes", []), *(_guide(c) for c in changes)]
    fig["data"] = [*fig["data"], _marks(changes)]


def _marks(changes: Sequence[DetectedChange]) -> dict[str, Any]:
    colours = [colour_of(c.component) for c in changes]
    return {
        "type": "scatter", "name": "detected changes", "meta": META, "yaxis": AXIS,
        "showlegend": False, "mode": "markers", "x": [_midnight(c.day) for c in changes],
        "y": [MARK_Y] * len(changes), "hoverinfo": "text", "hoverlabel": {"align": "left"},
        "hovertext": [change_hover(c) for c in changes],
        "customdata": [change_url(c) for c in changes],
        "marker": {"symbol": [_symbol(c) for c in changes], "size": 14,
                   "color": colours, "line": {"color": colours, "width": 2}},
    }


def _symbol(change: DetectedChange) -> str:
    shape = "triangle-up" if change.change_pts > 0 else "triangle-down"
    return shape if change.unrecorded else f"{shape}-open"


def _guide(change: DetectedChange) -> dict[str, Any]:
    at = _midnight(change.day)
    return {"type": "line", "xref": "x", "yref": "y domain", "x0": at, "x1": at, "y0": 0,
            "y1": 1, "layer": "below", "opacity": 0.7, "name": META,
            "line": {"color": colour_of(change.component), "width": 1.5, "dash": "dash"}}


def change_hover(change: DetectedChange) -> str:
    """Hover text (HTML: every user-given name escaped)."""
    head = "Unrecorded change" if change.unrecorded else "Change"
    lines = [f"<b>{head}</b> · {_text(change.component)} · {_group(change)}",
             f"from {change.day:%Y-%m-%d}: {change.before_lost_pct:.2f}% → "
             f"{change.after_lost_pct:.2f}% of wall time ({change.change_pts:+.2f} pts)"]
    if change.rollout is None:
        lines.append("no rollout recorded within 2 days · <i>click to record one</i>")
    else:
        lines.append(f"rollout: {_text(change.rollout.name)} "
                     f"({change.rollout.at:%Y-%m-%d %H:%M} UTC) · <i>click to open it</i>")
    return "<br>".join(lines)


def change_url(change: DetectedChange) -> str:
    """Where a click goes: the rollout, or the change's row on the changes page."""
    if change.rollout is not None:
        return reverse("rollouts:detail", args=[change.rollout.id])
    day = change.day.isoformat()
    query = {"component": change.component, "team": change.team or "",
             "date_from": day, "date_to": day}
    return f"{reverse('changes:list')}?{urlencode({k: v for k, v in query.items() if v})}"


def _group(change: DetectedChange) -> str:
    return f"team {_text(change.team)}" if change.team else "the fleet"


def _text(value: str) -> str:
    short = value if len(value) <= HOVER_CHARS else value[:HOVER_CHARS - 1] + "…"
    return escape(short, quote=True)


def _midnight(day: date) -> str:
    """Plotly's UTC wall-clock text of the day's start (plotly.js reads no offsets)."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC).strftime("%Y-%m-%d %H:%M:%S")
