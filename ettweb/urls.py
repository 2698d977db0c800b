"""Root URLs: dashboard at ``/``, rollouts, components, weekly reports, the JSON API, Django
auth login, admin, and an unauthenticated health check."""

from django.contrib import admin
from django.urls import include, path

from ettweb.api.v1 import api
from ettweb.dashboard.views import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("rollouts/", include("ettweb.rollouts.urls")),
    path("components/", include("ettweb.components.urls")),
    path("reports/", include("ettweb.reports.urls")),
    path("", include("ettweb.dashboard.urls")),
]
