"""Admin: see and revoke API tokens (untick ``active``); tokens are issued by the command."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ettweb.access.tokens import when
from ettweb.api.models import ApiToken


class ExpiryFilter(admin.SimpleListFilter):
    """Which tokens expired, will expire, or never do (the list to review)."""

    title = "expiry"
    parameter_name = "expiry"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("never", "never expires"), ("later", "expires later"), ("past", "expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]
                 ) -> QuerySet[ApiToken] | None:
        now = timezone.now()
        return {"never": queryset.filter(expires_at__isnull=True),
                "later": queryset.filter(expires_at__gt=now),
                "past": queryset.filter(expires_at__lte=now)}.get(self.value() or "", queryset)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """The token list: each token's expiry beside its state; an admin may set, move or clear
    an expiry here (``ett_api_token --expires-in`` sets it on creation)."""

    list_display = ("prefix", "user", "name", "active", "expiry", "created", "last_used")
    list_editable = ("active",)
    list_filter = ("active", ExpiryFilter)
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("user", "prefix", "key_hash", "created", "last_used")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token shown nowhere is useless: `manage.py ett_api_token USER`

    @admin.display(description="expires", ordering="expires_at")
    def expiry(self, token: ApiToken) -> str:
        if token.expires_at is None:
            return "never"
        state = "expired" if token.expired(timezone.now()) else "expires"
        return f"{state} {when(token.expires_at)}"
