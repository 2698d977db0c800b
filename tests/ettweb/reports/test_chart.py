"""The e-mail's chart as matplotlib lays it out: text a phone can read, week labels that never
touch a rollout line, badges that do not cover each other.

Each figure is drawn first (``canvas.draw``), so every position read here is where the PNG
has it, in display pixels (``SCALE`` per CSS pixel at ``WIDTH_PX``).
"""

from __future__ import annotations

import io
import random
from datetime import UTC, datetime, timedelta

import pytest
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Text
from PIL import Image

from ettweb.queries.markers import RolloutMarker
from ettweb.queries.weekly import HistoryWeek, IsoWeek
from ettweb.reports.chart import (
    MAX_BADGE_ROWS,
    PLOT_HEIGHT_PX,
    SCALE,
    WIDTH_PX,
    labelled_weeks,
    trend_figure,
    trend_png,
)

FIRST = IsoWeek(2026, 3)
#: How wide the mail shows the chart on a phone 380 px wide (test_report_browser measures
#: at least this), and the smallest text that stays readable there (CSS px).
PHONE_CHART_PX = 340
SMALLEST_PX = 9.0
COMPONENTS = ("pt2_compiler", "checkpointing", "reliability", "data_ingestion", "unknown")


def weeks(values: list[float | None]) -> list[HistoryWeek]:
    history, week = [], FIRST
    for value in values:
        history.append(HistoryWeek(week, value))
        week = week.next
    return history


def rollout(number: int, at: datetime, component: str = "pt2_compiler") -> RolloutMarker:
    return RolloutMarker(id=number, name=f"rollout {number}", component=component, at=at,
                         scope="whole fleet", link="")


def monday() -> datetime:
    return datetime.combine(FIRST.monday, datetime.min.time(), tzinfo=UTC)


def drawn(values: list[float | None],
          markers: list[RolloutMarker]) -> tuple[Figure, Axes, RendererBase]:
    figure = trend_figure(weeks(values), markers)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    return figure, figure.axes[0], renderer


def week_labels(axes: Axes) -> list[Text]:
    """The ETT% written on the chart (badges are the texts with a box)."""
    return [t for t in axes.texts if t.get_bbox_patch() is None and t.get_text().endswith("%")]


def badges(axes: Axes) -> list[Text]:
    return [t for t in axes.texts if t.get_bbox_patch() is not None]


def rollout_lines_x(axes: Axes) -> list[float]:
    """Each rollout's dashed line, as a display x."""
    return [float(axes.transData.transform((line.get_xdata()[0], 0))[0])  # type: ignore[index]
            for line in axes.get_lines() if line.get_linestyle() == "--"]


def ett_line(axes: Axes) -> list[list[tuple[float, float]]]:
    """The ETT% line's stretches between weeks without data, in display pixels."""
    (line,) = [line for line in axes.get_lines() if line.get_linestyle() == "-"]
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):  # type: ignore[arg-type]
        if y != y:
            runs.append([])
        else:
            px, py = axes.transData.transform((x, y))
            runs[-1].append((float(px), float(py)))
    return [run for run in runs if run]


def every_text(figure: Figure) -> list[Text]:
    axes = figure.axes[0]
    return [t for t in [*axes.get_xticklabels(), *axes.get_yticklabels(), *axes.texts]
            if t.get_text()]


def random_chart(seed: int) -> tuple[list[float | None], list[RolloutMarker]]:
    """Eight weeks of ETT% (now and then a week without data) and 0 to 24 rollouts anywhere
    in them, several often on one day."""
    rng = random.Random(seed)
    values: list[float | None] = [None if rng.random() < 0.1 else round(rng.uniform(40, 99.9), 4)
                                  for _ in range(8)]
    values[-1] = None if seed % 10 == 9 else rng.uniform(40, 99.9)
    days = [rng.uniform(0, 56) for _ in range(rng.randint(0, 24))]
    if days and rng.random() < 0.3:
        days += [days[0] + rng.uniform(0, 0.2) for _ in range(3)]  # a burst on one day
    markers = [rollout(n, monday() + timedelta(days=min(day, 55.99)), COMPONENTS[n % 5])
               for n, day in enumerate(sorted(days), start=1)]
    return values, markers


def test_the_png_is_drawn_at_twice_the_width_the_mail_shows_it() -> None:
    png = trend_png(weeks([70.0, 71.5, 73.25]), [rollout(1, monday() + timedelta(days=9))])
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width == WIDTH_PX * SCALE == 1040


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_text_is_readable_on_a_phone(seed: int) -> None:
    """Shown ``PHONE_CHART_PX`` wide, no tick, badge or label is under ``SMALLEST_PX``."""
    figure, _, _ = drawn(*random_chart(seed))
    texts = every_text(figure)
    assert len(texts) >= 8 + 3  # the weeks, the y ticks, at least the end label
    for text in texts:
        shown_px = text.get_fontsize() * 100 / 72 * PHONE_CHART_PX / WIDTH_PX
        assert shown_px >= SMALLEST_PX, (text.get_text(), shown_px)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.slow
def test_week_labels_never_touch_a_rollout_line(seed: int) -> None:
    """Whatever the weeks and rollouts: no week's label crosses a rollout's line, another
    label, the ETT% line or a dot, and each stays inside the picture."""
    values, markers = random_chart(seed)
    figure, axes, renderer = drawn(values, markers)
    lines = rollout_lines_x(axes)
    assert len(lines) == len(markers)
    labels = week_labels(axes)
    boxes = [label.get_window_extent(renderer) for label in labels]
    width = WIDTH_PX * SCALE
    for label, box in zip(labels, boxes, strict=True):
        assert box.x0 >= 0 and box.x1 <= width and 0 <= box.y0 <= box.y1 <= figure.bbox.y1
        touching = [x for x in lines if box.x0 - 2 <= x <= box.x1 + 2]
        assert touching == [], f"{label.get_text()} at {box} touches rollout lines {touching}"
        clear = box.padded(2)
        for run in ett_line(axes):
            assert not any(clear.contains(x, y) for x, y in run), label.get_text()
            assert len(run) == 1 or not Path(run).intersects_bbox(clear, filled=False)
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1:])
    written = {label.get_text() for label in labels}
    assert written <= {f"{v:.2f}%" for v in values if v is not None}
    if values[-1] is not None:  # the report's week is always written, at the line's end
        (end,) = [label for label in labels if label.get_text() == f"{values[-1]:.2f}%"
                  and label.get_window_extent(renderer).x0 > axes.bbox.x1]
        assert end.get_fontweight() == "bold"


def test_the_report_weeks_label_clears_a_rollout_every_day_of_that_week() -> None:
    """Seven rollouts in the last week, one a day up to Sunday 23:00: the week's ETT% is
    still written, right of all of them; the highest week is written too."""
    last = monday() + timedelta(weeks=7)
    markers = [rollout(n, last + timedelta(days=n, hours=23 if n == 6 else 12))
               for n in range(7)]
    _, axes, renderer = drawn([60.0, 62.0, 75.5, 70.0, 71.0, 72.0, 73.0, 74.125], markers)
    texts = {t.get_text(): t.get_window_extent(renderer) for t in week_labels(axes)}
    assert "74.12%" in texts or "74.13%" in texts
    end = texts.get("74.12%") or texts["74.13%"]
    assert end.x0 > max(rollout_lines_x(axes)) + 2
    assert "75.50%" in texts  # the highest, in the rollout-free weeks


def test_which_weeks_are_labelled_inside_the_plot() -> None:
    """The report's week is written at the line's end; inside go the highest, the lowest
    and the first (each once); when the report's week has no data, its last week with data
    comes first."""
    nan = float("nan")
    assert labelled_weeks([70.0, 90.0, 60.0, 80.0]) == [1, 2, 0]
    assert labelled_weeks([60.0, 90.0, 80.0]) == [1, 0]
    assert labelled_weeks([nan, 80.0, 90.0, nan]) == [2, 1]
    assert labelled_weeks([nan, nan]) == []


def test_badges_of_rollouts_on_one_day_stack_without_covering_each_other() -> None:
    """Four rollouts within hours: four rows of badges above the plot, none on another,
    and the plot keeps its height (the picture grows instead)."""
    day = monday() + timedelta(days=17, hours=9)
    crowded = [rollout(n, day + timedelta(hours=n), COMPONENTS[n]) for n in range(1, 5)]
    figure, axes, renderer = drawn([70.0] * 8, crowded)
    boxes = [t.get_bbox_patch().get_window_extent(renderer)  # type: ignore[union-attr]
             for t in badges(axes)]
    assert len(boxes) == 4 == MAX_BADGE_ROWS
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert all(box.y0 >= axes.bbox.y1 and box.y1 <= figure.bbox.y1 for box in boxes)
    single, single_axes, _ = drawn([70.0] * 8, crowded[:1])
    assert axes.bbox.height == pytest.approx(single_axes.bbox.height)
    assert axes.bbox.height == pytest.approx(PLOT_HEIGHT_PX * SCALE)
    assert figure.bbox.height > single.bbox.height


def test_a_chart_without_data_says_so() -> None:
    figure, axes, _ = drawn([None] * 8, [])
    assert week_labels(axes) == []
    assert "no training data in these weeks" in {t.get_text() for t in every_text(figure)}

