"""The report's picture: the last weeks of fleet ETT% with rollout markers, as a PNG.

Drawn with matplotlib's Agg canvas — no browser, no network, about a tenth of a second —
because an e-mail must carry its image inline (``cid:``): mail clients block remote images
and a dashboard behind a VPN is not reachable from a phone. ``Figure`` is used directly
(no pyplot), so no global figure state leaks between reports drawn in one process.

Sizes are CSS pixels at the width the mail shows the chart at most (``WIDTH_PX``, the HTML's
``max-width``); the PNG holds ``SCALE`` times as many pixels, so it stays sharp on phones.
A phone 380 px wide shows it about 340 px wide, two thirds of that: the fonts are sized so
that what they say is still about 9-10 px tall there.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from typing import TYPE_CHECKING, Final

from ettweb.platform.colours import colour_of, ink_on
from ettweb.queries.markers import RolloutMarker
from ettweb.queries.weekly import HistoryWeek

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox, Transform

# matplotlib writes a font cache under $MPLCONFIGDIR; a read-only home must not break a send.
os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "ett-matplotlib"))

LINE = "#2563eb"
GRID = "#e5e7eb"
TEXT = "#374151"
#: The chart's width as the mail shows it at most, and its plot area's height (CSS px);
#: drawn at ``SCALE`` times that.
WIDTH_PX: Final = 520
PLOT_HEIGHT_PX: Final = 190
SCALE: Final = 2
#: Font sizes (CSS px at ``WIDTH_PX``): ticks, the labelled weeks, rollout badges, and the
#: note of a chart without data.
TICK_PX: Final = 15
LABEL_PX: Final = 16
BADGE_PX: Final = 15
NOTE_PX: Final = 16
#: Margins around the plot area (CSS px): room for "100%" on the left, for the week names
#: below, and above for the rows of rollout badges (``BADGE_ROW_PX`` each); on the right,
#: the report's week's ETT% when it has one (measured), else ``RIGHT_PX``.
LEFT_PX, RIGHT_PX, BOTTOM_PX, TOP_PX = 60.0, 18.0, 30.0, 12.0
BADGE_ROW_PX: Final = 24.0
#: Badges closer than ``BADGE_GAP_PX`` go up a row; past this many rows they overlap.
MAX_BADGE_ROWS: Final = 4
BADGE_GAP_PX: Final = 3.0
#: Clearance a week's label keeps from marker lines, the ETT% line and other labels (px).
CLEARANCE_PX: Final = 3.0
#: A week's label sits ``GAP_PX`` above, below or beside its point, and may slide sideways
#: until its near side is ``REACH_PX`` past the point; it keeps ``DOT_PX`` from every dot.
GAP_PX, REACH_PX, DOT_PX = 8.0, 12.0, 4.0


def _pt(px: float) -> float:
    """CSS px at ``WIDTH_PX`` in typographic points (the figure is 100 dots per inch)."""
    return px * 72.0 / 100.0


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
    its component's colour (:func:`ettweb.platform.colours.colour_of`), as its marker on the
    dashboard does, so an owner spots their rollouts the same way in both.

    Only the first and last weeks and the highest and lowest are labelled with their ETT%
    (the text part lists every week), each where it touches no rollout line, no other
    label and not the ETT% line itself; a week with no such spot goes unlabelled."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    figure = Figure(figsize=(WIDTH_PX / 100, 1.0), dpi=100 * SCALE)
    canvas = FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = list(range(len(history)))
    ys = [float("nan") if h.ett_pct is None else h.ett_pct for h in history]
    axes.plot(xs, ys, color=LINE, linewidth=2.5, marker="o", markersize=5, zorder=3)
    known = [y for y in ys if y == y]
    low, high = min(known, default=0.0), max(known, default=100.0)
    pad = max(2.0, (high - low) * 0.3)
    axes.set_ylim(max(0.0, low - pad), min(100.0, high + pad) + 2)
    # The axis ends where the report's week does: every rollout line lies left of it.
    axes.set_xlim(-0.6, len(history) - 0.5)
    axes.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}%"))
    axes.set_xticks(xs, [f"W{h.week.week:02d}" for h in history])
    axes.tick_params(labelsize=_pt(TICK_PX), colors=TEXT, length=3)
    if history:  # the report's own week, last, in bold
        axes.get_xticklabels()[-1].set_fontweight("bold")
    axes.grid(axis="y", color=GRID, linewidth=0.8)
    for side in ("top", "right", "left"):
        axes.spines[side].set_visible(False)
    if not known:
        axes.text(0.5, 0.5, "no training data in these weeks", transform=axes.transAxes,
                  ha="center", va="center", fontsize=_pt(NOTE_PX), color=TEXT)
    at = [_position(m.at, history[0]) if history else 0.0 for m in markers]
    end = f"{ys[-1]:.2f}%" if ys and ys[-1] == ys[-1] else ""
    right = GAP_PX + _text_width(canvas.get_renderer(), end, LABEL_PX) + 4 if end else RIGHT_PX
    figure.subplots_adjust(left=LEFT_PX / WIDTH_PX, right=1 - right / WIDTH_PX)
    rows = _badge_rows(axes, canvas.get_renderer(), at)
    _size(figure, 1 + max(rows, default=-1))
    renderer = canvas.get_renderer()
    _draw_markers(axes, markers, at, rows)
    taken = [_end_label(axes, renderer, end, ys[-1])] if end else []
    _label_weeks(axes, renderer, xs, ys, at, taken)
    return figure


def _end_label(axes: Axes, renderer: RendererBase, text: str, y: float) -> Bbox:
    """The report's week's ETT% at the end of the line, right of the plot, where no rollout
    line reaches; returns where it went."""
    label = axes.annotate(text, (1.0, y), xycoords=axes.get_yaxis_transform(),
                          xytext=(_pt(GAP_PX), 0), textcoords="offset points", ha="left",
                          va="center", fontsize=_pt(LABEL_PX), fontweight="bold", color=LINE,
                          annotation_clip=False)
    return label.get_window_extent(renderer)


def _text_width(renderer: RendererBase, text: str, px: float, bold: bool = True) -> float:
    """How wide ``text`` is drawn at ``px`` (CSS px)."""
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(size=_pt(px), weight="bold" if bold else "normal")
    width, _, _ = renderer.get_text_width_height_descent(text, prop, ismath=False)
    return float(width) / SCALE


def _size(figure: Figure, badge_rows: int) -> None:
    """The figure's height: the plot area's, the margins, and a row per badge row, so many
    rollouts take room above the plot rather than from it."""
    top = TOP_PX + badge_rows * BADGE_ROW_PX
    height = PLOT_HEIGHT_PX + BOTTOM_PX + top
    figure.set_size_inches(WIDTH_PX / 100, height / 100)
    figure.subplots_adjust(bottom=BOTTOM_PX / height, top=1 - top / height)


def _badge_width(renderer: RendererBase, number: int) -> float:
    """A badge's width in CSS px: its digits and the box's padding (0.2 em each side)."""
    return _text_width(renderer, str(number), BADGE_PX) + 0.4 * BADGE_PX


def _badge_rows(axes: Axes, renderer: RendererBase, at: Sequence[float]) -> list[int]:
    """A row per badge, lowest first: each goes in the lowest row where it clears the badge
    before it by ``BADGE_GAP_PX``; past ``MAX_BADGE_ROWS`` in the row with the most room."""
    ends: list[float] = []  # the right edge of the last badge in each row
    rows = []
    for number, x in enumerate(at, start=1):
        centre = axes.transData.transform((x, 0))[0] / SCALE
        half = _badge_width(renderer, number) / 2
        free = [r for r, end in enumerate(ends) if end + BADGE_GAP_PX <= centre - half]
        if free:
            row = free[0]
        elif len(ends) < MAX_BADGE_ROWS:
            row = len(ends)
            ends.append(0.0)
        else:
            row = min(range(len(ends)), key=lambda r: ends[r])
        ends[row] = centre + half
        rows.append(row)
    return rows


def _draw_markers(axes: Axes, markers: Sequence[RolloutMarker], at: Sequence[float],
                  rows: Sequence[int]) -> None:
    """A dashed line and a numbered badge per rollout, in its component's colour; numbered
    at the top (the e-mail's table names them) in the rows :func:`_badge_rows` chose."""
    for number, (marker, x, row) in enumerate(zip(markers, at, rows, strict=True), start=1):
        colour = colour_of(marker.component)
        axes.axvline(x, color=colour, linewidth=1.2, linestyle="--", zorder=2)
        axes.annotate(str(number), (x, 1.0), xycoords=axes.get_xaxis_transform(),
                      xytext=(0, _pt(6 + row * BADGE_ROW_PX)), textcoords="offset points",
                      fontsize=_pt(BADGE_PX), color=ink_on(colour), ha="center", va="bottom",
                      fontweight="bold", annotation_clip=False,
                      bbox={"boxstyle": "round,pad=0.2", "facecolor": colour,
                            "edgecolor": "none"})


@dataclass(frozen=True)
class _Obstacles:
    """What a week's label must keep clear of, in display pixels: it stays inside ``frame``
    (the figure's width, the plot area's height) and off the marker lines, the labels
    already written and the ETT% line with its dots."""

    frame: Bbox
    lines_x: list[float]
    runs: list[list[tuple[float, float]]]  # the ETT% line, one run per stretch of data
    taken: list[Bbox]

    def clear_of(self, box: Bbox) -> bool:
        from matplotlib.path import Path

        padded = box.padded(CLEARANCE_PX * SCALE)
        if not (self.frame.x0 <= padded.x0 and padded.x1 <= self.frame.x1
                and self.frame.y0 <= padded.y0 and padded.y1 <= self.frame.y1):
            return False
        if any(padded.x0 <= x <= padded.x1 for x in self.lines_x):
            return False
        if any(padded.overlaps(other) for other in self.taken):
            return False
        dot = padded.padded(DOT_PX * SCALE)
        for run in self.runs:
            if any(dot.contains(x, y) for x, y in run):
                return False
            if len(run) > 1 and Path(run).intersects_bbox(padded, filled=False):
                return False
        return True

    def edges(self) -> list[float]:
        """Every x a label's side may have to keep clear of."""
        return [self.frame.x0, self.frame.x1, *self.lines_x,
                *(x for box in self.taken for x in (box.x0, box.x1))]


def _runs(transform: Transform, xs: Sequence[int],
          ys: Sequence[float]) -> list[list[tuple[float, float]]]:
    """The ETT% line's stretches between weeks without data, in display pixels."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(xs, ys, strict=True):
        if y != y:
            runs.append([])
            continue
        px, py = transform.transform((x, y))
        runs[-1].append((float(px), float(py)))
    return [run for run in runs if run]


def labelled_weeks(ys: Sequence[float]) -> list[int]:
    """Which weeks get their ETT% written inside the plot, most important first: the last
    with data when it is not the report's week (that one is written at the line's end),
    then the highest, the lowest and the first."""
    known = [i for i, y in enumerate(ys) if y == y]
    if not known:
        return []
    order = [known[-1], max(known, key=lambda i: ys[i]), min(known, key=lambda i: ys[i]),
             known[0]]
    return [i for i in dict.fromkeys(order) if i != len(ys) - 1]


def _spot(box: Bbox, obstacles: _Obstacles) -> tuple[float, float] | None:
    """How far to move ``box`` (a label centred on its point) so it is clear: above the
    point, else below, else beside it; sideways no further than leaves its near side
    ``REACH_PX`` from the point. The nearest clear position wins; None: there is none."""
    gap, reach = GAP_PX * SCALE, REACH_PX * SCALE
    half_w, half_h = box.width / 2, box.height / 2
    clearance = CLEARANCE_PX * SCALE + 1
    point = box.x0 + half_w
    centres = {point, point - half_w - gap, point + half_w + gap}
    for edge in obstacles.edges():
        centres |= {edge - half_w - clearance, edge + half_w + clearance}
    for dy, least in ((half_h + gap, 0.0), (-half_h - gap, 0.0), (0.0, half_w + gap)):
        moves = sorted((c - point for c in centres if least <= abs(c - point) <= half_w + reach),
                       key=abs)
        for dx in moves:
            if obstacles.clear_of(box.translated(dx, dy)):
                return dx, dy
    return None


def _label_weeks(axes: Axes, renderer: RendererBase, xs: Sequence[int], ys: Sequence[float],
                 lines_at: Sequence[float], taken: list[Bbox]) -> list[Annotation]:
    """Write the ETT% of :func:`labelled_weeks` where :func:`_spot` finds room; returns the
    labels written."""
    from matplotlib.transforms import Bbox

    transform = axes.transData
    plot = axes.get_window_extent(renderer)
    obstacles = _Obstacles(
        frame=Bbox.from_extents(plot.x0, plot.y0, WIDTH_PX * SCALE, plot.y1),
        lines_x=[float(transform.transform((x, 0))[0]) for x in lines_at],
        runs=_runs(transform, xs, ys),
        taken=taken)
    written = []
    for index in labelled_weeks(ys):
        label = axes.annotate(f"{ys[index]:.2f}%", (xs[index], ys[index]), xytext=(0, 0),
                              textcoords="offset points", ha="center", va="center",
                              fontsize=_pt(LABEL_PX), color=TEXT, zorder=4)
        box = label.get_window_extent(renderer)
        move = _spot(box, obstacles)
        if move is None:
            label.remove()
            continue
        label.xyann = (_pt(move[0] / SCALE), _pt(move[1] / SCALE))
        obstacles.taken.append(box.translated(*move))
        written.append(label)
    return written
