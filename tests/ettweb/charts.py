"""Read the figures a page embeds: ``to_fragment`` writes each as a JSON block, no script.

``<script type="application/json" class="ett-figure" data-target="ID">{data, layout,
config}</script>`` (static/ett/ett.js draws it), so tests read the numbers a chart shows
straight from the page.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any


def figure_of(html: str, div_id: str) -> dict[str, Any]:
    """The figure (``data``, ``layout``, ``config``) drawn into the div ``div_id``."""
    match = re.search(r'<script type="application/json" class="ett-figure" data-target="'
                      + re.escape(escape(div_id)) + r'">(.*?)</script>', html, re.S)
    assert match is not None, f"no figure for #{div_id}"
    figure: dict[str, Any] = json.loads(match.group(1))
    return figure


def traces_of(html: str, div_id: str) -> list[dict[str, Any]]:
    """The figure's traces."""
    traces: list[dict[str, Any]] = figure_of(html, div_id)["data"]
    return traces


def figure_ids(html: str) -> list[str]:
    """Every div a page draws a figure into, in page order."""
    return re.findall(r'<script type="application/json" class="ett-figure" data-target="([^"]+)">',
                      html)
