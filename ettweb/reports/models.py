"""Who gets the weekly report, and what happened to each week's send.

A :class:`Subscription` is one user's: where to send, in which time zone, and what it covers
(the whole fleet, and the components listed first: chosen ones, and those the user owns).
Where to send is the account's own address (the one an admin or the identity provider set:
the only address ETT knows to be the user's) unless an admin set another (``email_from_admin``):
anyone could otherwise send the fleet's numbers to any address (issue 40, item 4a). A
:class:`SendRecord` is one (subscription, week): created when the week is planned, claimed by
exactly one sender with a conditional UPDATE before anything is sent, and left in the admin
with its attempts and last error. The unique constraint on (subscription, week) is what makes
"exactly once" hold across two beats, a retried task and the manual command alike.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Subscription(models.Model):
    """One user's weekly report: address, time zone, on/off, and its scope."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="report_subscription")
    email = models.EmailField(max_length=254, help_text=(
        "where the report goes: the account's address, or another one an admin set here"))
    email_from_admin = models.BooleanField(default=False, help_text=(
        "the address was set by an admin and is not the account's; otherwise it is the "
        "account's, and follows it when the account's address changes"))
    enabled = models.BooleanField(default=True, help_text="off: no more reports")
    time_zone = models.CharField(max_length=64, default="UTC",
                                 help_text="the report arrives Monday 09:00 here (IANA name)")
    fleet = models.BooleanField(default=True, help_text=(
        "list every component's lost time, not only the subscribed ones"))
    components = models.JSONField(default=list, blank=True,
                                  help_text="components listed first (names)")
    owned = models.BooleanField(default=True, help_text=(
        "also list first the components the user owns (their owner role's, read for each "
        "report)"))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    unsubscribed_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1, editable=False, help_text=(
        "goes up each time the report is turned back on: unsubscribe links of an earlier "
        "version no longer unsubscribe"))

    #: ``enabled`` as loaded from the database (None: not loaded, e.g. a new row).
    _loaded_enabled: bool | None = None

    class Meta:
        ordering = ["email"]

    def __str__(self) -> str:
        return f"{self.email} ({'on' if self.enabled else 'off'})"

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any) -> Subscription:
        instance = super().from_db(db, field_names, values)
        instance._loaded_enabled = instance.enabled if "enabled" in field_names else None
        return instance

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Turned back on (loaded off, saved on): a new version, so unsubscribe links in
        reports sent before cannot undo it (``ettweb.reports.unsubscribe``). The settings
        page and the admin both save through here; the unsubscribe link only turns off."""
        if self.pk is not None and self.enabled and self._loaded_enabled is False:
            self.version += 1
            fields = kwargs.get("update_fields")
            if fields is not None:
                kwargs["update_fields"] = {*fields, "version"}
        super().save(*args, **kwargs)
        self._loaded_enabled = self.enabled


class SendStatus(models.TextChoices):
    PENDING = "pending", "pending"
    SENDING = "sending", "sending (claimed)"
    RETRY = "retry", "waiting to retry"
    SENT = "sent", "sent"
    FAILED = "failed", "failed"
    MISSED = "missed", "missed (claimed, never finished)"
    CANCELLED = "cancelled", "cancelled (unsubscribed)"


#: A record in these states is still to be sent (by whoever claims it first).
CLAIMABLE = (SendStatus.PENDING, SendStatus.RETRY)


class SendRecord(models.Model):
    """One subscription's report for one ISO week, claimed once, sent at most once."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE,
                                     related_name="sends")
    week = models.CharField(max_length=8, help_text="ISO week, e.g. 2026-W47")
    status = models.CharField(max_length=9, choices=SendStatus.choices,
                              default=SendStatus.PENDING)
    due_at = models.DateTimeField(help_text="Monday 09:00 in the subscriber's zone + jitter")
    next_attempt_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    recipient = models.EmailField(max_length=254, blank=True, default="")
    subject = models.CharField(max_length=200, blank=True, default="")
    message_id = models.CharField(max_length=200, blank=True, default="")
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-week", "due_at", "id"]
        constraints = [models.UniqueConstraint(fields=["subscription", "week"],
                                               name="one_send_per_subscription_week")]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.week} → {self.recipient or self.subscription.email}: {self.status}"
