"""Template filters only the report needs (the rest come from ett_format and rollout_format)."""

from __future__ import annotations

from typing import Any

from django import template

from ettweb.colours import colour_of, ink_on
from ettweb.dashboard.templatetags.ett_format import small_hours

register = template.Library()


def _hours(value: float) -> str:
    """One precision a reader can scan down a column: ``1,204`` from 100 up, ``12.5`` below,
    and significant digits where one decimal would print a bare ``0.0`` for time that was
    spent (``0.0313``, see :func:`ettweb.dashboard.templatetags.ett_format.small_hours`)."""
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
    """Readable text colour on ``background`` (see :func:`ettweb.colours.ink_on`)."""
    return ink_on(background)
