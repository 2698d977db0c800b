"""Root URLs: dashboard at ``/``, Django auth login, admin, and an unauthenticated health check."""

from django.contrib import admin
from django.urls import include, path

from ettweb.dashboard.views import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("", include("ettweb.dashboard.urls")),
]
