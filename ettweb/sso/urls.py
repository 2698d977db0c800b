"""``/accounts/sso/login/`` (to the provider) and ``/accounts/sso/callback/`` (back: the
redirect URI registered with the provider)."""

from __future__ import annotations

from django.urls import path

from ettweb.pages.parameters import takes
from ettweb.sso.views import SsoCallbackView, SsoLoginView

app_name = "sso"
urlpatterns = [
    path("login/", takes("next")(SsoLoginView.as_view()), name="login"),
    # Not checked for unknown parameters: OAuth 2.0 (RFC 6749, 4.1.2) has a client ignore
    # response parameters it does not know, and providers add their own (session_state).
    path("callback/", SsoCallbackView.as_view(), name="callback"),
]
