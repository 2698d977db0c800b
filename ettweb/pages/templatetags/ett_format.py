"""Template filters that format ETT numbers the same way on every page."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """``42.0 s``, ``3m 05s`` or ``2h 07m``: precise for short spans, readable for long."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


@register.filter
def pct(value: float | None) -> str:
    """A percentage with two decimals (the spec's reporting precision)."""
    return "—" if value is None else f"{value:.2f}%"


@register.filter
def ett(result: object) -> str:
    """The ETT% of anything with ``wall_gpu_s`` and ``ett_pct`` (a trend, a page of jobs):
    "—" when it counted no time. Why not ``pct``: the queries say 0% for no wall time (a
    ratio must be a number in the API), which on a page reads as "nothing trained"."""
    wall = getattr(result, "wall_gpu_s", None)
    return pct(getattr(result, "ett_pct", None)) if wall else "—"


@register.filter
def count(value: float | None) -> str:
    """A whole number with thousands separators (``200,320``); "—" for none."""
    return "—" if value is None else f"{int(value):,}"


@register.filter
def durations(values: list[float]) -> str:
    """A list of durations (time to recover has one per failure): up to three of them,
    comma-separated; more as their mean and count (the restart table lists each), so a job
    restarted 23 times does not stretch its tile down the page."""
    if not values:
        return "—"
    if len(values) <= 3:
        return ", ".join(duration(v) for v in values)
    return f"{duration(sum(values) / len(values))} mean of {len(values)}"


#: Digits a small GPU-hours number keeps: ``0.00417``, not ``0.00``, for a one-GPU demo.
SIGNIFICANT = 3
#: Below this many GPU-hours (0.36 GPU-seconds) a value reads ``<0.0001``: still not zero.
SMALLEST_SHOWN = 0.0001


def small_hours(value: float) -> str:
    """A non-zero value under one GPU-hour with ``SIGNIFICANT`` digits, in fixed notation
    (a column of ``0.0123`` and ``0.000417`` scans; ``4.17e-04`` does not)."""
    size = abs(value)
    if size < SMALLEST_SHOWN:
        return f"{'-' if value < 0 else ''}<{SMALLEST_SHOWN:f}".rstrip("0")
    decimals = SIGNIFICANT - 1 - math.floor(math.log10(size))
    return f"{value:.{max(decimals, 2)}f}"


@register.filter
def hours(value: float | None) -> str:
    """GPU-hours for tiles and tables: three significant digits under one (a small fleet's
    ``0.0313``, never a bare ``0.00`` for time that was spent), two decimals up to 10,000,
    then whole thousands, then millions (``222.66M``), so a fleet's 222,656,779 GPU-hours
    still fit their tile; thousands separated throughout (``9,881.95`` beside ``154,257``).
    Zero is ``0``."""
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if abs(value) < 1:
        return small_hours(value)
    if abs(value) < 10_000:
        return f"{value:,.2f}"
    if abs(value) < 1_000_000:
        return f"{value:,.0f}"
    return f"{value / 1_000_000:,.2f}M"


@register.filter
def gpu_hours(gpu_seconds: float | None) -> str:
    """GPU-seconds shown as GPU-hours (see ``hours``)."""
    return "—" if gpu_seconds is None else hours(gpu_seconds / 3600.0)


#: U+2212: a minus as wide as the plus, so signed columns line up.
MINUS = "\u2212"


@register.filter
def signed_pts(value: float | None) -> str:
    """A change in percentage points with its sign (a true minus sign): ``+1.25 pts``."""
    if value is None:
        return "—"
    return f"{'+' if value >= 0 else MINUS}{abs(value):.2f} pts"


@register.filter
def signed_pct(value: float | None) -> str:
    """A relative change with its sign: ``+1.4%``."""
    if value is None:
        return "—"
    return f"{'+' if value >= 0 else MINUS}{abs(value):.1f}%"


@register.filter
def utc_time(epoch: float | None) -> str:
    """Epoch seconds as ``2026-03-01 14:15 UTC`` (empty for none)."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%d %H:%M UTC")


def _ago_words(seconds: float) -> str:
    """``just now``, ``3 min ago``, ``5 h ago``, ``12 days ago``; the future as ``in 3 min``."""
    ahead, size = seconds < 0, abs(seconds)
    if size < 45:
        return "just now"
    # Minutes up to two hours and hours up to two days: "95 min ago" says more than "2 h".
    for limit, unit, name in ((7200, 60, "min"), (172_800, 3600, "h"),
                              (math.inf, 86_400, "day")):
        if size < limit:
            n = round(size / unit)
            words = f"{n} {name}{'s' if name == 'day' and n != 1 else ''}"
            return f"in {words}" if ahead else f"{words} ago"
    raise AssertionError("unreachable")  # the last limit is infinite


@register.filter
def ago(moment: datetime | None, now: datetime | None = None) -> SafeString | str:
    """How long ago, in words, with the moment itself (UTC) on hover and in the markup:
    "is this collector alive?" is read at a glance, the exact time is one hover away."""
    if moment is None:
        return "—"
    now = now or timezone.now()
    exact = moment.astimezone(UTC)
    return format_html('<time datetime="{}" title="{}">{}</time>', exact.isoformat(),
                       exact.strftime("%Y-%m-%d %H:%M:%S UTC"),
                       _ago_words((now - moment).total_seconds()))
