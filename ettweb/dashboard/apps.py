"""App config for the dashboard."""

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """Login-protected pages over ingested events; numbers come from the attribution engine."""

    name = "ettweb.dashboard"
    label = "dashboard"
