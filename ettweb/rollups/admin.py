"""Admin: owners edit the phase→component map here; rollups are read-only views."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from ettweb.rollups.models import JobRollup, PhaseComponent


@admin.register(PhaseComponent)
class PhaseComponentAdmin(admin.ModelAdmin):
    """Editing a row re-maps lost time at the next page load: rollups store categories."""

    list_display = ("phase", "component")
    list_editable = ("component",)
    search_fields = ("phase", "component")


@admin.register(JobRollup)
class JobRollupAdmin(admin.ModelAdmin):
    """Computed numbers: visible for support, never edited by hand (refresh recomputes)."""

    list_display = ("job", "ett_pct", "wall_s", "attempts", "status", "gpus", "failures",
                    "updated_at")
    search_fields = ("job", "model", "team", "cluster")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
