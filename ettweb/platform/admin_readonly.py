"""Admin building blocks for stored facts: view-only model admins and epoch columns as UTC.

Raw events, the quarantine, collector health and rollups are what ingestion and the rollup
refresh wrote; an admin user editing or deleting one by hand would silently change every
ETT% computed from it (or hide why a line was refused), and the next refresh would not say
so. Those admins therefore only show. Their times are epoch seconds in the database (the
event schema's unit); a column of ``1772366400.0`` means nothing to a reader, so lists and
detail pages show them as UTC date-times.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest


def utc_text(epoch_s: float | None) -> str:
    """``2026-03-01 12:00:05 UTC`` (milliseconds only when the time has a fraction)."""
    if epoch_s is None:
        return "—"
    moment = datetime.fromtimestamp(epoch_s, UTC)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return f"{moment.isoformat(sep=' ', timespec=spec).removesuffix('+00:00')} UTC"


def utc_column(field: str, label: str | None = None) -> Callable[[Any, Any], str]:
    """A display method showing the epoch-seconds ``field`` as UTC, sortable by the field.

    Assign it to a name on the admin class and list that name in ``list_display`` and
    ``readonly_fields``.
    """
    @admin.display(description=label or f"{field.replace('_', ' ')} (UTC)", ordering=field)
    def show(model_admin: Any, obj: Any) -> str:
        return utc_text(getattr(obj, field))

    return show


class ReadOnlyAdmin(admin.ModelAdmin):
    """Listed and viewed, never added, changed or deleted in the admin (bulk delete too):
    superusers included, since ``has_*_permission`` is asked before any user permission."""

    actions = None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
