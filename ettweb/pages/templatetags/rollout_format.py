"""Template filters for changes: always signed, in points and relative (ETT_SPEC §1)."""

from __future__ import annotations

from collections.abc import Sequence

from django import template

register = template.Library()


@register.filter
def pts(value: float | None) -> str:
    """``+3.63 pts`` / ``-0.40 pts``; a dash when there is nothing to compare."""
    return "—" if value is None else f"{value:+.2f} pts"


@register.filter
def rel(value: float | None) -> str:
    """A relative change as a signed percentage: ``+4.48%``."""
    return "—" if value is None else f"{100.0 * value:+.2f}%"


@register.filter
def interval(value: Sequence[float] | None) -> str:
    """``[+2.91, +4.30] pts``, or the spec's wording when there is no interval."""
    if not value:
        return "too few jobs"
    low, high = value
    return f"[{low:+.2f}, {high:+.2f}] pts"
