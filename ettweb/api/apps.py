"""App config for the API."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """``/api/v1/``: rollouts and their impact, bearer-token authenticated."""

    name = "ettweb.api"
    label = "api"
    default_auto_field = "django.db.models.BigAutoField"
