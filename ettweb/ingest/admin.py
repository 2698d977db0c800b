"""Admin registration: operators inspect raw events and the quarantine here.

Events, jobs, the quarantine and collector health are view-only (see
:mod:`ettweb.platform.admin_readonly`); only collector credentials are managed here, and a
collector's recorded rejection may be deleted (a retired node's, to forget it).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from ettweb.ingest.models import (
    CollectorCredential,
    CollectorHealth,
    CollectorRejection,
    Event,
    Job,
    QuarantinedEvent,
    RejectionTally,
)
from ettweb.platform.admin_readonly import ReadOnlyAdmin, utc_column, utc_text


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "job", "attempt", "kind", "phase", "mark", "rank", "start_utc",
                    "end_utc", "ts_utc")
    list_filter = ("kind",)
    search_fields = ("event_id", "job", "phase")
    readonly_fields = ("start_utc", "end_utc", "ts_utc")
    start_utc = utc_column("start")
    end_utc = utc_column("end")
    ts_utc = utc_column("ts", "mark time (UTC)")


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "model", "team", "cluster", "first_seen", "last_event_utc")
    search_fields = ("job_id", "model", "team", "cluster")
    readonly_fields = ("last_event_utc",)
    last_event_utc = utc_column("last_event_time", "last event (UTC)")


@admin.register(QuarantinedEvent)
class QuarantinedEventAdmin(ReadOnlyAdmin):
    list_display = ("received_at", "source", "job", "reason", "raw_bytes", "lines")
    search_fields = ("reason", "source", "job", "raw", "raw_sha256")


@admin.register(CollectorCredential)
class CollectorCredentialAdmin(admin.ModelAdmin):
    """The secret is generated, never typed, and shown only as a prefix after creation."""

    list_display = ("name", "collector_id", "active", "secret_prefix", "created")
    list_filter = ("active",)
    search_fields = ("name", "collector_id")
    readonly_fields = ("collector_id", "secret_prefix", "created")
    exclude = ("secret",)

    def save_model(self, request: HttpRequest, obj: CollectorCredential, form: Any,
                   change: bool) -> None:
        if not change:
            obj.collector_id = f"col-{secrets.token_hex(8)}"
            obj.secret = secrets.token_hex(32)
            messages.warning(request, f"Copy these now, the secret is not shown again: "
                                      f"ETT_COLLECTOR_ID={obj.collector_id} "
                                      f"ETT_COLLECTOR_SECRET={obj.secret}")
        super().save_model(request, obj, form, change)


@admin.register(CollectorHealth)
class CollectorHealthAdmin(ReadOnlyAdmin):
    list_display = ("source", "collector_id", "backlog_bytes", "backlog_events", "shipped_events",
                    "dropped_events", "corrupted_records", "spool_files", "last_success",
                    "updated_at")
    search_fields = ("source", "collector_id")
    readonly_fields = ("last_success", "report_epoch_utc")

    @admin.display(description="last success (UTC)", ordering="last_success_ts")
    def last_success(self, obj: CollectorHealth) -> str:
        return "never" if obj.last_success_ts is None else utc_text(obj.last_success_ts)

    @admin.display(description="agent started (UTC)")
    def report_epoch_utc(self, obj: CollectorHealth) -> str:
        """The agent's start time orders its reports; 0 means it does not say."""
        return utc_text(obj.report_epoch) if obj.report_epoch else "—"


@admin.register(CollectorRejection)
class CollectorRejectionAdmin(ReadOnlyAdmin):
    """Shown as recorded; deletable, unlike the other stored facts, because no number is
    computed from it: deleting a retired node's rejection only takes it off /collectors/
    (a node still refused is recorded again at its next batch or report)."""

    list_display = ("source", "collector_id", "reason", "refused", "refusals", "first_at",
                    "last_at")
    list_filter = ("refused",)
    search_fields = ("source", "collector_id", "reason")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)  # Django's rules


@admin.register(RejectionTally)
class RejectionTallyAdmin(ReadOnlyAdmin):
    """Every credential refusal counted per reason: the exact totals behind the bounded
    per-source rows above (``ettweb.ingest.credentials.record_rejection``)."""

    list_display = ("reason", "refusals", "sources", "first_at", "last_at")
