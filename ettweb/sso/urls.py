"""``/accounts/sso/login/`` (to the provider) and ``/accounts/sso/callback/`` (back: the
redirect URI registered with the provider)."""

from __future__ import annotations

from django.urls import path

from ettweb.sso.views import SsoCallbackView, SsoLoginView

app_name = "sso"
urlpatterns = [
    path("login/", SsoLoginView.as_view(), name="login"),
    path("callback/", SsoCallbackView.as_view(), name="callback"),
]
