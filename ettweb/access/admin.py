"""Admin: who owns which component (the owner role acts on those)."""

from __future__ import annotations

from django.contrib import admin

from ettweb.access.models import ComponentOwner


@admin.register(ComponentOwner)
class ComponentOwnerAdmin(admin.ModelAdmin):
    """Add a row to make a user (in the ``owner`` group) an owner of one more component."""

    list_display = ("component", "user")
    list_filter = ("component",)
    search_fields = ("component", "user__username")
    autocomplete_fields = ("user",)
