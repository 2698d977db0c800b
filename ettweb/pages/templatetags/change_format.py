"""Template filters for detected changes: ``{{ changes|unrecorded|length }}``."""

from __future__ import annotations

from collections.abc import Iterable

from django import template

from ettweb.queries import DetectedChange

register = template.Library()


@register.filter
def unrecorded(changes: Iterable[DetectedChange]) -> list[DetectedChange]:
    """The changes no recorded rollout explains."""
    return [c for c in changes if c.unrecorded]
