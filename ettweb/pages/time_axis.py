"""Days and ISO weeks on a figure's x axis: each point drawn in the middle of the period it
stands for, ticks under the period they name, and the parts of a weekly axis outside the
asked-for range shaded.

Why whole periods: with one or two points plotly zooms into milliseconds around them and
labels ticks 23:59:59.999, and a rollout at 09:00 must fall inside its day's bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from ettweb.pages.figures import Figure
from ettweb.queries.base import DateRange

DAY_MS = 86_400_000
#: ISO weeks start on Monday; plotly's own week periods and ticks would start on Sunday.
MONDAY = "2000-01-03"
#: Room at each end of a time axis, as a share of its span: edge markers stay whole.
EDGE_PAD = 0.02


def period_axis(fig: Figure, periods: Sequence[str], interval: str = "day",
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
    low = min([midnight(days[0]), *moments])
    high = max([midnight(days[-1]) + timedelta(milliseconds=period_ms), *moments])
    pad = (high - low) * EDGE_PAD
    low, high = low - pad, high + pad
    xaxis["range"] = [plotly_time(low), plotly_time(high)]
    if (high - low) <= timedelta(milliseconds=31 * period_ms):
        xaxis["dtick"] = period_ms
        if week:
            xaxis["tick0"] = MONDAY
    return low, high


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def plotly_time(moment: datetime) -> str:
    """UTC wall-clock text: plotly.js reads no time-zone offsets, so none is written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def period_label(period: date, interval: str) -> str:
    """What a point stands for, in the hover: a day, or the ISO week from its Monday."""
    if interval == "week":
        return f"week of {period.isoformat()}"
    return period.isoformat()


def partial_days(period: date, interval: str, days: DateRange | None) -> int | None:
    """How many of a week's 7 days the range covers, when it does not cover all of them
    (None: a whole period, or a day)."""
    if interval != "week" or days is None:
        return None
    covered = sum(1 for offset in range(7)
                  if days.date_from <= period + timedelta(days=offset) <= days.date_to)
    return covered if covered < 7 else None


#: The shade over the parts of a weekly axis outside the range.
OUTSIDE_COLOUR = "#9aa3ad"


def shade_outside_range(fig: Figure, days: DateRange) -> None:
    """Shade the parts of a weekly axis that lie outside the range (its first and last weeks
    run past it), so a partial week is not read as a whole one."""
    xaxis = fig["layout"].get("xaxis", {})
    if "range" not in xaxis:
        return
    low, high = xaxis["range"]
    start = plotly_time(midnight(days.date_from))
    end = plotly_time(midnight(days.date_to) + timedelta(days=1))
    shades = [(low, start)] if low < start else []
    shades += [(end, high)] if end < high else []
    fig["layout"]["shapes"] = [*fig["layout"].get("shapes", []), *(
        {"type": "rect", "xref": "x", "x0": x0, "x1": x1, "yref": "paper", "y0": 0, "y1": 1,
         "fillcolor": OUTSIDE_COLOUR, "opacity": 0.15, "line": {"width": 0}, "layer": "below"}
        for x0, x1 in shades)]
