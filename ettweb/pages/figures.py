"""What every plotly figure on a page shares: the layout, a time unit, hover text made safe,
and the rendering of a figure into a page fragment.

Queries return plain numbers; only page code calls the figure builders, so the API and the
exports reuse the queries without dragging plotly along. Every figure is rendered as an
HTML fragment without plotly.js: the page loads our own static copy (no CDN).

Figures are built as plain figure JSON (plotly's own schema: ``data`` traces and a
``layout``), not as ``go.Figure`` objects: validating the objects (property setters,
validators, deep copies) costs server time on every page, for a figure that renders the
same. ``tests/ettweb/dashboard/test_dashboard_figures_schema.py`` validates each builder
against plotly's schema instead, once per test run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

import plotly.io as pio

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


def title(text: str) -> dict[str, str]:
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


#: Longest name or scope shown in hover text (the page's table has the whole text).
HOVER_CHARS = 60


def hover_text(value: str, limit: int = HOVER_CHARS) -> str:
    """User text made safe for plotly, which renders hover and tick text as HTML."""
    short = value if len(value) <= limit else value[:limit - 1] + "…"
    return escape(short, quote=True)
