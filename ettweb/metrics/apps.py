"""App config for ``/metrics``."""

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """``/metrics``: the fleet's totals in Prometheus's text format, behind a bearer token."""

    name = "ettweb.metrics"
    label = "metrics"
    default_auto_field = "django.db.models.BigAutoField"
