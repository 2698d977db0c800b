"""Admin: owners set each component's owner team here (or on the component page)."""

from __future__ import annotations

from django.contrib import admin

from ettweb.components.models import Component


@admin.register(Component)
class ComponentAdmin(admin.ModelAdmin):
    list_display = ("name", "owner_team")
    list_editable = ("owner_team",)
    search_fields = ("name", "owner_team")
