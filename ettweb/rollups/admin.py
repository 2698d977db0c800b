"""Admin: owners edit the phase→component map here; rollups are read-only views."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ettweb.platform.admin_readonly import ReadOnlyAdmin, utc_column
from ettweb.platform.deferred import send_once
from ettweb.rollups.models import JobRollup, ParkedRefresh, PhaseComponent


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


@admin.register(ParkedRefresh)
class ParkedRefreshAdmin(ReadOnlyAdmin):
    """Jobs whose refresh failed, with the error; parked ones wait here for an admin.

    Read-only but for one action: retry sends ``ett.retry_refresh``, which forgets the
    failures and refreshes the jobs at once (``ettweb.rollups.parking``). Fix the cause first
    (a job whose events span more than ``ETT_REFRESH_MAX_JOB_DAYS`` parks again)."""

    list_display = ("job", "parked_at", "failures", "error", "last_failed_at")
    list_filter = (("parked_at", admin.EmptyFieldListFilter),)
    search_fields = ("job", "error")
    actions = ["retry"]  # type: ignore[assignment]  # ReadOnlyAdmin has none

    @admin.action(description="Retry the refresh of the selected jobs")
    def retry(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        jobs = sorted(queryset.values_list("job", flat=True))
        if send_once("ett.retry_refresh", [jobs], within_s=0):
            self.message_user(request, f"Retrying the refresh of {len(jobs)} job(s).")
        else:
            self.message_user(request, "The worker could not be reached: nothing was retried.",
                              messages.ERROR)
