"""Admin: rollouts are created by deploy pipelines (API) and staff (forms); edited here too."""

from __future__ import annotations

from django.contrib import admin

from ettweb.rollouts.forms import RolloutAdminForm
from ettweb.rollouts.models import Rollout


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    """Same checks as the API and the dashboard form (``RolloutAdminForm``)."""

    form = RolloutAdminForm
    list_display = ("name", "component", "at", "scope", "created_by", "simulated")
    list_filter = ("component", "simulated")
    search_fields = ("name", "component", "notes")
    date_hierarchy = "at"
    readonly_fields = ("created_at", "updated_at")
