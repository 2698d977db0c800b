"""API tokens: bearer secrets for deploy pipelines, stored hashed.

Why a hash and not the secret (unlike collector credentials, which the worker needs in clear
to verify HMACs): the API only needs to recognise a token, so a leaked database backup must
not hand out working tokens. Tokens are 256-bit random, so one SHA-256 pass is enough (a
slow password hash protects low-entropy secrets; these are not). ``prefix`` is the first
characters of the token, shown in the admin so people can tell tokens apart.

``expires_at`` is optional (issue 40, design point 5h: tokens never expired): set when the
token is issued (``ett_api_token --expires-in DAYS``), shown then and in the admin's list,
and a token past it is refused with a 401 that says when it expired. Optional, not forced:
a deploy pipeline's token that dies unnoticed stops deploys from being recorded, so whoever
issues it decides, and the admin lists every token that never expires.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """One bearer token of one user; revoke it by unticking ``active`` in the admin."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=200, blank=True, default="",
                            help_text="what it is for, e.g. the deploy pipeline's name")
    prefix = models.CharField(max_length=12, help_text="first characters, to tell tokens apart")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token")
    active = models.BooleanField(default=True, help_text="untick to revoke")
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text=(
        "refused from this moment on (UTC); empty: never expires"))

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
