"""Single sign-on's two URLs: away to the provider, and back from it.

Both are mozilla-django-oidc's views (state, nonce and PKCE kept in the session, the next
page kept safe), given their endpoints by discovery; every way a sign-in can fail is a page
that says what failed (:class:`~ettweb.sso.errors.Refused`), never a 500 or a silent
redirect.
"""

from __future__ import annotations

import re
from typing import Any, Final

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.generic import View
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from ettweb.sso.config import SsoConfig, sso_config
from ettweb.sso.discovery import provider
from ettweb.sso.errors import Refused
from ettweb.sso.library import library_setting

#: An OAuth error code (RFC 6749 §4.1.2.1); anything else in ``error`` is not repeated on
#: the page (the callback URL is anyone's to craft, so it must not put words in our mouth).
ERROR_CODE: Final = re.compile(r"[a-z_]{1,64}")
#: The session key the library keeps each sign-in's state, nonce and PKCE verifier under.
STATES: Final = "oidc_states"


def enabled() -> SsoConfig:
    """The provider's settings; a 404 page while single sign-on is off."""
    config = sso_config()
    if config is None:
        raise Refused("single sign-on is off (ETT_OIDC_ISSUER is not set): log in with a "
                      "username and password", status=404)
    return config


def refused(request: HttpRequest, refusal: Refused) -> HttpResponse:
    return render(request, "sso/refused.html", {"reason": str(refusal)},
                  status=refusal.status)


class SsoLoginView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's log-in (``?next=`` is where it comes back to)."""

    config: SsoConfig

    def __init__(self, **kwargs: Any) -> None:
        # Not the library's __init__: the endpoint comes from discovery, in get().
        View.__init__(self, **kwargs)

    def get_settings(self, attr: str, *default: Any) -> Any:
        return library_setting(self.config, attr, *default)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.config = enabled()
            self.OIDC_OP_AUTH_ENDPOINT = provider(self.config).authorization_endpoint
        except Refused as refusal:
            return refused(request, refusal)
        self.OIDC_RP_CLIENT_ID = self.config.client_id
        response: HttpResponse = super().get(request)
        return response


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: signs in, or says why not."""

    config: SsoConfig

    def get_settings(self, attr: str, *default: Any) -> Any:
        return library_setting(self.config, attr, *default)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.config = enabled()
            _check_callback(request)
            response: HttpResponse = super().get(request)
        except Refused as refusal:
            return refused(request, refusal)
        return response

    def login_failure(self) -> HttpResponse:
        raise Refused("the sign-in did not complete; start again from the log-in page")


def _check_callback(request: HttpRequest) -> None:
    """Refuse a callback the library would only redirect away from: the provider's error,
    a missing parameter, a state this browser did not start."""
    states = request.session.get(STATES)
    state = request.GET.get("state")
    if "error" in request.GET:
        if isinstance(states, dict) and states.pop(state, None) is not None:
            request.session[STATES] = states  # no replay of a refused sign-in's state
        code = request.GET["error"]
        shown = code if ERROR_CODE.fullmatch(code) else "an unrecognised error"
        raise Refused(f"error parameter: the identity provider did not sign you in ({shown})",
                      status=403)
    for name in ("code", "state"):
        if not request.GET.get(name):
            raise Refused(f"{name} parameter: missing; a sign-in comes back with the "
                          f"provider's code and state, start again from the log-in page")
    if not isinstance(states, dict) or state not in states:
        raise Refused("state parameter: no sign-in this browser started has it (an old or "
                      "forged link, a sign-in already finished, or one begun in another "
                      "browser); start again from the log-in page")
