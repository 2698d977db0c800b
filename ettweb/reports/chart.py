"""The report's picture: the last weeks of fleet ETT% with rollout markers, as a PNG.

Drawn with matplotlib's Agg canvas — no browser, no network, about a tenth of a second —
because an e-mail must carry its image inline (``cid:``): mail clients block remote images
and a dashboard behind a VPN is not reachable from a phone. ``Figure`` is used directly
(no pyplot), so no global figure state leaks between reports drawn in one process.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, time
from typing import TYPE_CHECKING

from ettweb.colours import colour_of, ink_on
from ettweb.queries.markers import RolloutMarker
from ettweb.queries.weekly import HistoryWeek

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# matplotlib writes a font cache under $MPLCONFIGDIR; a read-only home must not break a send.
os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "ett-matplotlib"))

LINE = "#2563eb"
GRID = "#e5e7eb"
TEXT = "#374151"
WIDTH_PX, HEIGHT_PX, SCALE = 640, 260, 2  # drawn at 2x so it is sharp on high-DPI screens


def _position(at: datetime, first: HistoryWeek) -> float:
    """Where a rollout falls on the week axis: 0.0 is the middle of the first week."""
    start = datetime.combine(first.week.monday, time(0), tzinfo=UTC)
    return (at - start).total_seconds() / (7 * 86400.0) - 0.5


def trend_png(history: Sequence[HistoryWeek], markers: Sequence[RolloutMarker]) -> bytes:
    """A PNG of ETT% per week (gaps where a week has no data) with a numbered line per
    rollout (``markers`` in time order: number n is ``markers[n - 1]``)."""
    buffer = io.BytesIO()
    trend_figure(history, markers).savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def trend_figure(history: Sequence[HistoryWeek], markers: Sequence[RolloutMarker]) -> Figure:
    """The chart of :func:`trend_png`, not yet rendered. A rollout's line and number take
    its component's colour (:func:`ettweb.colours.colour_of`), as its marker on the
    dashboard does, so an owner spots their rollouts the same way in both."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_PX / 100, HEIGHT_PX / 100), dpi=100 * SCALE)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = list(range(len(history)))
    ys = [float("nan") if h.ett_pct is None else h.ett_pct for h in history]
    axes.plot(xs, ys, color=LINE, linewidth=2, marker="o", markersize=4, zorder=3)
    known = [y for y in ys if y == y]
    for x, y in zip(xs, ys, strict=True):
        if y == y:
            axes.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 7),
                          ha="center", fontsize=7, color=TEXT)
    low = min(known, default=0.0)
    high = max(known, default=100.0)
    pad = max(2.0, (high - low) * 0.25)
    axes.set_ylim(max(0.0, low - pad), min(100.0, high + pad) + 2)
    axes.set_xlim(-0.6, len(history) - 0.4)
    _draw_markers(axes, history, markers)
    axes.set_xticks(xs, [f"W{h.week.week:02d}" for h in history], fontsize=7, color=TEXT)
    axes.tick_params(axis="y", labelsize=7, colors=TEXT)
    axes.set_ylabel("fleet ETT%", fontsize=8, color=TEXT)
    axes.grid(axis="y", color=GRID, linewidth=0.8)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    if not known:
        axes.text(0.5, 0.5, "no training data in these weeks", transform=axes.transAxes,
                  ha="center", va="center", fontsize=9, color=TEXT)
    # Fixed margins (what tight_layout chose for this size, room kept for "100" on the y
    # axis): tight_layout measured every text twice and cost half the chart's time.
    figure.subplots_adjust(left=0.09, right=0.987, bottom=0.107,
                           top=0.856 if markers else 0.968)
    return figure


def _draw_markers(axes: Axes, history: Sequence[HistoryWeek],
                  markers: Sequence[RolloutMarker]) -> None:
    """A dashed line and a numbered badge per rollout, in its component's colour."""
    previous, row = None, 0
    for number, marker in enumerate(markers, start=1):
        at = _position(marker.at, history[0]) if history else 0.0
        colour = colour_of(marker.component)
        axes.axvline(at, color=colour, linewidth=1, linestyle="--", zorder=2)
        # Numbered at the top (the e-mail lists the names): labels beside each other would
        # collide as soon as a few rollouts share a week. Close neighbours alternate rows.
        row = 1 if previous is not None and at - previous < 0.25 and row == 0 else 0
        previous = at
        axes.text(at, 1.01 + 0.07 * row, str(number), transform=axes.get_xaxis_transform(),
                  fontsize=6.5, color=ink_on(colour), ha="center", va="bottom",
                  fontweight="bold",
                  bbox={"boxstyle": "round,pad=0.2", "facecolor": colour, "edgecolor": "none"})
