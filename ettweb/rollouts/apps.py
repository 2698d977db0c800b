"""App config for rollouts."""

from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    """Optimization rollouts; their measured impact lives in ``ettweb.queries.impact``."""

    name = "ettweb.rollouts"
    label = "rollouts"
    default_auto_field = "django.db.models.BigAutoField"
