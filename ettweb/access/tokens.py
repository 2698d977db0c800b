"""Issuing and checking API tokens (hashed at rest, compared by hash lookup): who a request
that carries a bearer token is, for the API, the Prometheus scrape and the API's docs alike.
The token model stays in the api app, which owns its table.

Checking a token writes nothing: most requests that carry one are GETs (a dashboard, a
Prometheus scrape), and a GET never writes. When a token was last used is still kept, for
the admin's list of tokens to revoke: the check sends ``ett.note_token_used`` to the worker
at most once per :data:`NOTE_USE_EVERY_S` per token and process, so ``last_used`` is right
to within that.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from ettweb.api.models import ApiToken
from ettweb.platform.deferred import send_once

#: Every token starts with this, so secret scanners and people recognise one on sight.
TOKEN_PREFIX = "ett_"
PREFIX_CHARS = 10
#: How stale ``ApiToken.last_used`` may be: a token's use is sent to the worker once per this.
NOTE_USE_EVERY_S: Final = 300.0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


#: The longest life ``ett_api_token --expires-in`` gives a token (ten years).
MAX_EXPIRES_IN_DAYS: Final = 3650


class TokenExpired(Exception):
    """A known, active token past its ``expires_at``; ``str`` is the refusal, for the 401."""


def when(moment: datetime) -> str:
    """``2026-12-07 19:25 UTC``: how an expiry is shown on creation, in the list, in a 401."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def issue_token(user: Any, name: str = "", expires_at: datetime | None = None) -> str:
    """Create a token for ``user`` and return it: the only time it exists in clear.
    ``expires_at`` (aware, in the future) makes it refused from then on; None: never."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError(f"expires_at: {when(expires_at)} has passed")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name[:200], prefix=token[:PREFIX_CHARS],
                            key_hash=_digest(token), expires_at=expires_at)
    return token


def user_for_token(token: str) -> Any | None:
    """The active user an active, unexpired token belongs to, else None; its use is sent to
    the worker (``ett.note_token_used``), never written here. An expired one raises
    :class:`TokenExpired`, so the caller can say when it expired instead of "invalid"."""
    if not token or len(token) > 200:
        return None
    row = (ApiToken.objects.select_related("user")
           .filter(key_hash=_digest(token), active=True).first())
    if row is None or not row.user.is_active:
        return None
    if row.expires_at is not None and row.expires_at <= timezone.now():
        raise TokenExpired(
            f"bearer token: {row.prefix}… expired on {when(row.expires_at)}; ask an admin "
            f"for a new one (python manage.py ett_api_token {row.user.username} "
            f"--expires-in DAYS)")
    send_once("ett.note_token_used", [row.pk, timezone.now().isoformat()],
              within_s=NOTE_USE_EVERY_S, key=f"token {row.pk}")
    return row.user


def record_use(token_id: int, at: datetime) -> bool:
    """Record that token ``token_id`` was used at ``at``, unless a later use is recorded
    (uses may arrive out of order); whether it changed."""
    earlier = Q(last_used__isnull=True) | Q(last_used__lt=at)
    return bool(ApiToken.objects.filter(earlier, pk=token_id).update(last_used=at))


#: The 401 a request with a bad bearer token gets (the API's own wording).
BAD_TOKEN = ("missing or invalid bearer token (python manage.py ett_api_token USERNAME "
             "issues one)")


def session_or_token(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``view`` for a logged-in user or a request carrying a valid bearer token. A request
    with an ``Authorization: Bearer`` header is a program: a bad token gets a 401 saying so,
    never the log-in page. Any other anonymous request is a browser, sent to log in."""
    browser_view = login_required(view)

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if request.user.is_authenticated or scheme.lower() != "bearer":
            return browser_view(request, *args, **kwargs)
        try:
            user = user_for_token(token.strip())
        except TokenExpired as exc:
            return JsonResponse({"error": str(exc)}, status=401)
        if user is None:
            return JsonResponse({"error": BAD_TOKEN}, status=401)
        request.user = user
        return view(request, *args, **kwargs)

    return wrapped
