"""Template filters only the report needs (the rest come from ett_format and rollout_format)."""

from __future__ import annotations

from typing import Any, Final

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

from ettweb.pages.templatetags.ett_format import count, small_hours
from ettweb.platform.colours import colour_of, ink_on

register = template.Library()


def _hours(value: float) -> str:
    """One precision a reader can scan down a column: ``1,204`` from 100 up, ``12.5`` below,
    and significant digits where one decimal would print a bare ``0.0`` for time that was
    spent (``0.0313``, see :func:`ettweb.pages.templatetags.ett_format.small_hours`)."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value and abs(value) < 0.05:
        return small_hours(value)
    return f"{value:,.1f}"


@register.filter
def gpuh(gpu_seconds: float | None) -> str:
    """GPU-seconds as GPU-hours for a report's tables: ``5,549``, ``52.0``."""
    return "—" if gpu_seconds is None else _hours(gpu_seconds / 3600.0)


@register.filter
def signed_gpu_hours(gpu_seconds: float | None) -> str:
    """A change in GPU-hours, always signed: ``+1,299 GPU-h``, ``-3.0 GPU-h``."""
    if gpu_seconds is None:
        return "—"
    value = gpu_seconds / 3600.0
    return f"{'+' if value >= 0 else '-'}{_hours(abs(value))} GPU-h"


# The dashboard's count, so a report's numbers read as the pages' (``1,204`` failures).
register.filter("count", count)


#: A verdict's colour: green for the good direction (ETT% up, a lost share down), red for
#: the bad one, grey when the interval cannot tell.
VERDICT_COLOURS: Final = {"improved": "#047857", "reduced": "#047857",
                          "regressed": "#b91c1c", "increased": "#b91c1c"}


@register.filter
def verdict_colour(verdict: str) -> str:
    return VERDICT_COLOURS.get(verdict, "#6b7280")


@register.filter
def breakable(name: str) -> str:
    """A component's name that may wrap after each ``_`` (``distributed_<wbr>runtime``): a
    narrow table wraps it there, never inside a word."""
    return mark_safe(escape(name).replace("_", "_<wbr>"))  # escaped first: safe


@register.filter
def get_item(mapping: dict[Any, Any], key: Any) -> Any:
    """``mapping[key]`` in a template (links keyed by rollout id)."""
    return mapping.get(key, "")


@register.filter
def colour(name: str) -> str:
    """A component's chart colour: the e-mail's rollout numbers match the chart's badges."""
    return colour_of(name)


@register.filter
def ink(background: str) -> str:
    """Readable text colour on ``background`` (see :func:`ettweb.platform.colours.ink_on`)."""
    return ink_on(background)
