"""App config for rollups."""

from django.apps import AppConfig


class RollupsConfig(AppConfig):
    """Stored attribution results (by category) and the editable phase→component map."""

    name = "ettweb.rollups"
    label = "rollups"
    default_auto_field = "django.db.models.BigAutoField"
