"""Admin: subscriptions, and every send with its state, attempts and last error.

A stuck or missed send is visible here (filter by status); "send again" puts chosen sends
back in the queue — a person deciding that a possible duplicate is better than a gap.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ettweb.reports.models import SendRecord, SendStatus, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    """An admin may send a user's report to any address: saving one that is not the
    account's marks it ``email_from_admin`` (it then stays when the account's changes)."""

    list_display = ["email", "email_from_admin", "user", "enabled", "time_zone", "fleet",
                    "owned", "components", "created_at"]
    list_filter = ["enabled", "email_from_admin", "fleet", "owned", "time_zone"]
    search_fields = ["email", "user__username"]
    readonly_fields = ["email_from_admin", "version", "created_at", "updated_at",
                       "unsubscribed_at"]

    def save_model(self, request: HttpRequest, obj: Subscription, form: Any,
                   change: bool) -> None:
        obj.email_from_admin = obj.email != (obj.user.email or "")
        super().save_model(request, obj, form, change)


@admin.register(SendRecord)
class SendRecordAdmin(admin.ModelAdmin):
    list_display = ["week", "recipient", "status", "attempts", "due_at", "next_attempt_at",
                    "sent_at", "claimed_by", "short_error"]
    list_filter = ["status", "week"]
    search_fields = ["recipient", "subscription__email", "last_error"]
    readonly_fields = ["subscription", "week", "due_at", "claimed_at", "claimed_by", "sent_at",
                       "recipient", "subject", "message_id", "attempts", "last_error"]
    actions = ["send_again"]

    @admin.display(description="last error")
    def short_error(self, record: SendRecord) -> str:
        return record.last_error[:120]

    @admin.action(description="Send again (missed, failed or cancelled sends)")
    def send_again(self, request: HttpRequest, queryset: QuerySet[SendRecord]) -> None:
        again = queryset.filter(status__in=(SendStatus.MISSED, SendStatus.FAILED,
                                            SendStatus.CANCELLED))
        count = again.update(status=SendStatus.PENDING, next_attempt_at=timezone.now(),
                             claimed_at=None, claimed_by="")
        self.message_user(request, f"{count} send(s) queued again; sent within a minute by "
                                   "beat, or now by manage.py send_weekly_reports",
                          messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
