"""App config for components."""

from django.apps import AppConfig


class ComponentsConfig(AppConfig):
    """Owning components (ETT_SPEC §4) with their owner teams."""

    name = "ettweb.components"
    label = "components"
    default_auto_field = "django.db.models.BigAutoField"
