"""App config for changes."""

from django.apps import AppConfig


class ChangesConfig(AppConfig):
    """Level shifts in each component's daily lost share, for the fleet and each team,
    detected by beat (``ett.detect_changes``) and matched to rollouts when read."""

    name = "ettweb.changes"
    label = "changes"
    default_auto_field = "django.db.models.BigAutoField"
