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
from datetime import datetime
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


def issue_token(user: Any, name: str = "") -> str:
    """Create a token for ``user`` and return it: the only time it exists in clear."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name[:200], prefix=token[:PREFIX_CHARS],
                            key_hash=_digest(token))
    return token


def user_for_token(token: str) -> Any | None:
    """The active user an active token belongs to, else None; its use is sent to the worker
    (``ett.note_token_used``), never written here."""
    if not token or len(token) > 200:
        return None
    row = (ApiToken.objects.select_related("user")
           .filter(key_hash=_digest(token), active=True).first())
    if row is None or not row.user.is_active:
        return None
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
        user = user_for_token(token.strip())
        if user is None:
            return JsonResponse({"error": BAD_TOKEN}, status=401)
        request.user = user
        return view(request, *args, **kwargs)

    return wrapped
