"""Admin: see and revoke API tokens (untick ``active``); tokens are issued by the command."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from ettweb.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "active", "created", "last_used")
    list_editable = ("active",)
    list_filter = ("active",)
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("user", "prefix", "key_hash", "created", "last_used")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token shown nowhere is useless: `manage.py ett_api_token USER`
