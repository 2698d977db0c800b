"""Report pages (namespace ``reports``)."""

from django.urls import path

from ettweb.reports import views

app_name = "reports"

urlpatterns = [
    path("settings/", views.subscription_settings, name="settings"),
    path("preview/", views.preview, name="preview"),
    path("preview/chart.png", views.preview_chart, name="preview-chart"),
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
