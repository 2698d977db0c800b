"""App config for the weekly e-mail reports."""

from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Subscriptions, their send records, and the weekly ETT% e-mail (ETT_SPEC §7)."""

    name = "ettweb.reports"
    label = "reports"
    default_auto_field = "django.db.models.BigAutoField"
