"""Root URLs: dashboard at ``/``, rollouts, components, changes, weekly reports, the JSON API,
Django auth login, admin, and an unauthenticated health check.

Every page needs a login except ``/healthz``, the login pages (single sign-on's included)
and the token-authenticated unsubscribe link; tests/ettweb/test_security.py walks every
pattern here to keep it so.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from ettweb.access.tokens import session_or_token
from ettweb.api.v1 import api
from ettweb.dashboard.views import favicon, healthz
from ettweb.metrics.views import metrics
from ettweb.pages.parameters import takes

#: django-ninja's schema and Swagger pages (``/api/v1/openapi.json``, ``/api/v1/docs``).
API_DOCS = frozenset({"openapi-json", "openapi-view"})


def _docs_need_login(
    urls: tuple[list[URLResolver | URLPattern], str, str],
) -> tuple[list[URLResolver | URLPattern], str, str]:
    """The API's URLs with its docs behind a login: the dashboard's session or a bearer token.

    Why: the schema holds no data, but it maps every endpoint and field for whoever asks, and
    the rule is "every URL needs a login". A reader of the docs is a dashboard user or a
    program holding an API token (a client generator fetching ``openapi.json``), so both are
    let in (:func:`ettweb.access.tokens.session_or_token`). The same as ``NinjaAPI(docs_decorator=
    ...)``, applied here so the API module stays about the API.
    """
    patterns, app_name, namespace = urls
    wrapped: list[URLResolver | URLPattern] = [
        URLPattern(item.pattern, session_or_token(item.callback), item.default_args, item.name)
        if isinstance(item, URLPattern) and item.name in API_DOCS else item
        for item in patterns]
    return wrapped, app_name, namespace


# Log-in, log-out and password change only: no password-reset pages. Those would be open to
# anyone and send e-mail with a reset link, and ETT has no such flow (an administrator resets
# a password with ``manage.py ett_login USER``); password change needs a login.
auth_urlpatterns = [
    path("login/", takes("next")(auth_views.LoginView.as_view()), name="login"),
    path("logout/", takes("next")(auth_views.LogoutView.as_view()), name="logout"),
    path("password_change/", takes()(auth_views.PasswordChangeView.as_view()),
         name="password_change"),
    path("password_change/done/", takes()(auth_views.PasswordChangeDoneView.as_view()),
         name="password_change_done"),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # Browsers ask for /favicon.ico wherever a page names no icon (Django's admin pages).
    path("favicon.ico", favicon, name="favicon"),
    path("metrics", metrics, name="metrics"),  # bearer token, for Prometheus
    path("accounts/", include(auth_urlpatterns)),
    path("accounts/sso/", include("ettweb.sso.urls")),  # single sign-on, when configured
    path("admin/", admin.site.urls),
    path("api/v1/", _docs_need_login(api.urls)),
    path("rollouts/", include("ettweb.rollouts.urls")),
    path("components/", include("ettweb.components.urls")),
    path("changes/", include("ettweb.changes.urls")),
    path("reports/", include("ettweb.reports.urls")),
    path("", include("ettweb.dashboard.urls")),
]
