"""Admin: owners edit the phase→component map here; rollups are read-only views."""

from __future__ import annotations

from django.contrib import admin

from ettweb.platform.admin_readonly import ReadOnlyAdmin, utc_column
from ettweb.rollups.models import JobRollup, PhaseComponent


@admin.register(PhaseComponent)
class PhaseComponentAdmin(admin.ModelAdmin):
    """Editing a row re-maps lost time at the next page load: rollups store categories."""

    list_display = ("phase", "component")
    list_editable = ("component",)
    search_fields = ("phase", "component")


@admin.register(JobRollup)
class JobRollupAdmin(ReadOnlyAdmin):
    """Computed numbers: visible for support, never edited or deleted by hand (the refresh
    recomputes them; a deleted row would drop the job from every page until then)."""

    list_display = ("job", "ett_pct", "wall_s", "attempts", "status", "gpus", "failures",
                    "window_start_utc", "window_end_utc", "updated_at")
    search_fields = ("job", "model", "team", "cluster")
    readonly_fields = ("window_start_utc", "window_end_utc")
    window_start_utc = utc_column("window_start", "window start (UTC)")
    window_end_utc = utc_column("window_end", "window end (UTC)")
