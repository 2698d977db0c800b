"""Who may call ``/api/v1/``: a bearer token or the dashboard's logged-in session.

Deploy pipelines and scripts send ``Authorization: Bearer <token>`` (``manage.py
ett_api_token``) and act as the token's user and that user's role; the dashboard's own pages
read the API with the browser's session. Reads are open to every role; recording a rollout
asks ``ettweb.access.roles`` before the body is read, so a viewer's write is a 403 whatever
it sends.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth

from ettweb.access.roles import can_record_rollouts, refusal
from ettweb.access.tokens import TokenExpired, user_for_token


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>`` from ``manage.py ett_api_token USERNAME``."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        """The token's user; an expired token is a 401 saying when it expired (raised:
        ninja answers it through ``ettweb.api.errors``, before any other auth is tried)."""
        try:
            user = user_for_token(token)
        except TokenExpired as exc:
            raise HttpError(401, str(exc)) from None
        if user is not None:
            request.user = user
        return user


class BrowserSession(SessionAuth):
    """The dashboard's log-in session, so the browser reads the API as the user it is.

    A cookie rides along with any request a page on another site makes the browser send, so
    an unsafe method through the session must carry the CSRF token (``X-CSRFToken``), as a
    form post does; bearer tokens travel in a header no other site can set, and need none.
    """

    def _get_key(self, request: HttpRequest) -> str | None:
        if self.param_name not in request.COOKIES:
            return None  # no session to forge: a pipeline's bad token stays a 401
        try:
            return super()._get_key(request)
        except HttpError:
            raise HttpError(403, "CSRF: a logged-in session's POST needs the CSRF token "
                                 "(X-CSRFToken header from the csrftoken cookie)") from None


class _MayRecordRollouts:
    """Authenticated as the parent class does, then refused with a 403 unless the user may
    record rollouts (an owner or an admin): before the body is read, so a viewer's write is
    a 403 whatever it sends. Which component they may record is checked once it is known."""

    def __call__(self, request: HttpRequest) -> Any:
        user = super().__call__(request)  # type: ignore[misc]
        if user and not can_record_rollouts(user):
            raise HttpError(403, refusal(user, "record rollouts"))
        return user


class RolloutBearerToken(_MayRecordRollouts, BearerToken):
    """A bearer token whose user may record rollouts."""


class RolloutBrowserSession(_MayRecordRollouts, BrowserSession):
    """A logged-in session (CSRF-checked) whose user may record rollouts."""


#: What every operation takes unless it says otherwise.
READERS = [BearerToken(), BrowserSession()]
#: What recording a rollout takes.
ROLLOUT_WRITERS = [RolloutBearerToken(), RolloutBrowserSession()]
