"""``{% sso_provider %}``: the provider's name for the log-in page's button, or nothing."""

from __future__ import annotations

from django import template

from ettweb.sso.config import sso_config

register = template.Library()


@register.simple_tag
def sso_provider() -> str:
    """Empty while single sign-on is off."""
    config = sso_config()
    return config.provider_name if config else ""
