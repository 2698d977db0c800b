"""Single sign-on's settings as one value, and the check that they fit together.

The ``ETT_OIDC_*`` settings come from the environment (``ettweb/settings/base.py``); this
reads them from Django's settings on every use rather than once, so every process and every
test's ``override_settings`` see the same thing. :func:`check` runs at start-up (settings
import), so a half-configured provider stops the server with one line naming the variable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

#: ID token signatures ETT verifies with the provider's published keys (JWKS). No HS256: it
#: would make the client secret the signing key, shared with every copy of the secret.
SIGN_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                          "PS256", "PS384", "PS512")


@dataclass(frozen=True)
class SsoConfig:
    """Where the provider is, who ETT is to it, and how its groups become ETT roles."""

    issuer: str
    client_id: str
    client_secret: str
    provider_name: str
    scopes: tuple[str, ...]
    groups_claim: str
    username_claim: str
    admin_groups: frozenset[str]
    owner_prefix: str
    viewer_groups: frozenset[str]
    sign_algorithm: str
    timeout_s: float


def check(issuer: str | None, client_id: str | None, client_secret: str | None,
          scopes: Iterable[str], sign_algorithm: str, owner_prefix: str) -> None:
    """Refuse settings that cannot work, naming the variable (nothing to check while
    ``issuer`` is unset: single sign-on is then off)."""
    if not issuer:
        return
    for name, value in (("ETT_OIDC_CLIENT_ID", client_id),
                        ("ETT_OIDC_CLIENT_SECRET", client_secret)):
        if not value:
            raise ImproperlyConfigured(
                f"{name}: required when ETT_OIDC_ISSUER is set (single sign-on); the identity "
                f"provider shows it when ETT is registered as a client")
    if "openid" not in scopes:
        raise ImproperlyConfigured(
            f"ETT_OIDC_SCOPES: must include openid (without it there is no ID token), "
            f"got {' '.join(scopes)!r}")
    if sign_algorithm not in SIGN_ALGORITHMS:
        raise ImproperlyConfigured(
            f"ETT_OIDC_SIGN_ALGO: must be one of {', '.join(SIGN_ALGORITHMS)}, "
            f"not {sign_algorithm!r}")
    if not owner_prefix:
        raise ImproperlyConfigured("ETT_OIDC_OWNER_GROUP_PREFIX: must not be empty")


def sso_config() -> SsoConfig | None:
    """The configured provider, or None when single sign-on is off (no issuer)."""
    issuer: str | None = settings.ETT_OIDC_ISSUER
    if not issuer:
        return None
    scopes = tuple(settings.ETT_OIDC_SCOPES)
    client_id: str | None = settings.ETT_OIDC_CLIENT_ID
    client_secret: str | None = settings.ETT_OIDC_CLIENT_SECRET
    check(issuer, client_id, client_secret, scopes, settings.ETT_OIDC_SIGN_ALGO,
          settings.ETT_OIDC_OWNER_GROUP_PREFIX)
    assert client_id and client_secret  # check() refused them unset
    return SsoConfig(
        issuer=issuer, client_id=client_id, client_secret=client_secret,
        provider_name=settings.ETT_OIDC_PROVIDER_NAME or urlsplit(issuer).hostname or issuer,
        scopes=scopes, groups_claim=settings.ETT_OIDC_GROUPS_CLAIM,
        username_claim=settings.ETT_OIDC_USERNAME_CLAIM,
        admin_groups=frozenset(settings.ETT_OIDC_ADMIN_GROUPS),
        owner_prefix=settings.ETT_OIDC_OWNER_GROUP_PREFIX,
        viewer_groups=frozenset(settings.ETT_OIDC_VIEWER_GROUPS),
        sign_algorithm=settings.ETT_OIDC_SIGN_ALGO, timeout_s=settings.ETT_OIDC_TIMEOUT_S)
