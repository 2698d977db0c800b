"""API tokens: bearer secrets for deploy pipelines, stored hashed.

Why a hash and not the secret (unlike collector credentials, which the worker needs in clear
to verify HMACs): the API only needs to recognise a token, so a leaked database backup must
not hand out working tokens. Tokens are 256-bit random, so one SHA-256 pass is enough (a
slow password hash protects low-entropy secrets; these are not). ``prefix`` is the first
characters of the token, shown in the admin so people can tell tokens apart.
"""

from __future__ import annotations

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

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
