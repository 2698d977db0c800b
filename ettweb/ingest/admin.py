"""Admin registration: operators inspect raw events and the quarantine here."""

from django.contrib import admin

from ettweb.ingest.models import Event, Job, QuarantinedEvent


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
    list_display = ("received_at", "source", "job", "reason")
    search_fields = ("reason", "source", "job", "raw")
