"""Admin: owners set each component's owner team here (or on the component page); the phase
map's recorded moves are listed, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from ettweb.components.models import Component, PhaseMove


@admin.register(Component)
class ComponentAdmin(admin.ModelAdmin):
    list_display = ("name", "owner_team")
    list_editable = ("owner_team",)
    search_fields = ("name", "owner_team")


@admin.register(PhaseMove)
class PhaseMoveAdmin(admin.ModelAdmin):
    """The record of who moved which category where: read-only, as a record should be."""

    list_display = ("moved_at", "category", "from_component", "to_component", "moved_by")
    list_filter = ("from_component", "to_component")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
