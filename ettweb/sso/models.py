"""Which provider account each single sign-on user is.

A person is their provider's (issuer, subject) pair, never their e-mail address or
username: an address can be reassigned, or be unverified at some providers, and a local
account whose name or address matched would otherwise be handed to whoever the provider
vouches for.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """``user`` signs in as ``subject`` of ``issuer``; ``groups`` is what the provider said
    at their last sign-in (why they have the role they have)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255, help_text="the provider's sub claim")
    groups = models.JSONField(default=list, blank=True,
                              help_text="the groups claim at the last sign-in")
    last_sign_in = models.DateTimeField()

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        ordering = ["user__username"]
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"],
                                               name="sso_identity_once")]

    def __str__(self) -> str:
        return f"{self.user} is {self.subject} at {self.issuer}"
