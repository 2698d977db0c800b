"""mozilla-django-oidc's settings, given from :class:`~ettweb.sso.config.SsoConfig`.

The library reads ``OIDC_*`` Django settings; ETT's views and backend answer its questions
from the ``ETT_OIDC_*`` settings instead, so there is one set of names to configure and
nothing the library would read silently differs from them.
"""

from __future__ import annotations

from typing import Any

from mozilla_django_oidc.utils import import_from_settings

from ettweb.sso.config import SsoConfig


def library_setting(config: SsoConfig, attr: str, *default: Any) -> Any:
    """The library's ``attr`` for ``config``; the library's own default for the rest."""
    fixed: dict[str, Any] = {
        "OIDC_RP_SCOPES": " ".join(config.scopes),
        "OIDC_AUTHENTICATION_CALLBACK_URL": "sso:callback",
        # A nonce ties the ID token to the browser that asked; PKCE ties the code to it.
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_TIMEOUT": config.timeout_s,
        "OIDC_VERIFY_SSL": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        "OIDC_TOKEN_USE_BASIC_AUTH": False,
    }
    if attr in fixed:
        return fixed[attr]
    return import_from_settings(attr, *default)
