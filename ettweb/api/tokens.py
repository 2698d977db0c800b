"""Issuing and checking API tokens (hashed at rest, compared by hash lookup)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.utils import timezone

from ettweb.api.models import ApiToken

#: Every token starts with this, so secret scanners and people recognise one on sight.
TOKEN_PREFIX = "ett_"
PREFIX_CHARS = 10


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def issue_token(user: Any, name: str = "") -> str:
    """Create a token for ``user`` and return it: the only time it exists in clear."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name[:200], prefix=token[:PREFIX_CHARS],
                            key_hash=_digest(token))
    return token


def user_for_token(token: str) -> Any | None:
    """The active user an active token belongs to, else None; records when it was used."""
    if not token or len(token) > 200:
        return None
    row = (ApiToken.objects.select_related("user")
           .filter(key_hash=_digest(token), active=True).first())
    if row is None or not row.user.is_active:
        return None
    ApiToken.objects.filter(pk=row.pk).update(last_used=timezone.now())
    return row.user
