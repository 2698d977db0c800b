"""Admin registration: operators inspect raw events and the quarantine here."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from ettweb.ingest.models import (
    CollectorCredential,
    CollectorHealth,
    Event,
    Job,
    QuarantinedEvent,
)


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("event_id", "job", "attempt", "kind", "phase", "mark", "rank", "start", "end")
    list_filter = ("kind",)
    search_fields = ("event_id", "job", "phase")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("job_id", "model", "team", "cluster", "first_seen", "last_event_time")
    search_fields = ("job_id", "model", "team", "cluster")


@admin.register(QuarantinedEvent)
class QuarantinedEventAdmin(admin.ModelAdmin):
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
class CollectorHealthAdmin(admin.ModelAdmin):
    list_display = ("source", "collector_id", "backlog_bytes", "backlog_events", "shipped_events",
                    "dropped_events", "corrupted_records", "spool_files", "last_success",
                    "updated_at")
    search_fields = ("source", "collector_id")

    @admin.display(description="last success")
    def last_success(self, obj: CollectorHealth) -> str:
        if obj.last_success_ts is None:
            return "never"
        return datetime.fromtimestamp(obj.last_success_ts, UTC).isoformat(timespec="seconds")
