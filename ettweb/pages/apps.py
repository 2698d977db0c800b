"""App config for the shared page pieces: an installed app so its template filters load."""

from django.apps import AppConfig


class PagesConfig(AppConfig):
    """No models and no URLs: ``{% load ett_format %}`` finds its library only in an app."""

    name = "ettweb.pages"
    label = "pages"
