"""Admin: detected changes are shown, never edited (the next detection replaces them)."""

from __future__ import annotations

from django.contrib import admin

from ettweb.changes.models import Change
from ettweb.platform.admin_readonly import ReadOnlyAdmin


@admin.register(Change)
class ChangeAdmin(ReadOnlyAdmin):
    """What beat's ``ett.detect_changes`` found; a hand edit would be gone within the hour."""

    list_display = ("day", "component", "team", "before_lost_pct", "after_lost_pct",
                    "detected_at")
    list_filter = ("component",)
    search_fields = ("component", "team")
