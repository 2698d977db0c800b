"""The provider's endpoints, from its ``/.well-known/openid-configuration``.

Discovered at the first sign-in and kept for an hour, not read at start-up: a provider that
is down must not keep ETT (and its local log-ins) from starting, and a provider that moves
an endpoint is followed within the hour. A failure is not kept: the next sign-in asks again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import requests

from ettweb.sso.config import SsoConfig
from ettweb.sso.errors import ProviderError

KEEP_S: Final = 3600.0


@dataclass(frozen=True)
class Provider:
    """The endpoints of one issuer that the code flow uses (userinfo is optional in OpenID
    Connect: without it the ID token's claims are all there is)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    #: How ETT shows the token endpoint its secret: HTTP Basic (OpenID Connect's default)
    #: unless the provider takes it only in the form (client_secret_post).
    secret_in_form: bool = False


#: Issuer → (when discovered, on the monotonic clock; its provider).
_found: dict[str, tuple[float, Provider]] = {}


def discovery_url(issuer: str) -> str:
    return f"{issuer.rstrip('/')}/.well-known/openid-configuration"


def provider(config: SsoConfig) -> Provider:
    """The issuer's endpoints, discovered at most once an hour per process."""
    kept = _found.get(config.issuer)
    if kept is not None and time.monotonic() - kept[0] < KEEP_S:
        return kept[1]
    found = discover(config)
    _found[config.issuer] = (time.monotonic(), found)
    return found


def forget() -> None:
    """Drop every discovered provider (tests that start a new one on a reused address)."""
    _found.clear()


def discover(config: SsoConfig) -> Provider:
    """Fetch and check the discovery document; :class:`ProviderError` naming the setting."""
    url = discovery_url(config.issuer)
    try:
        response = requests.get(url, timeout=config.timeout_s)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ProviderError(f"ETT_OIDC_ISSUER: the provider's discovery document {url} "
                            f"cannot be fetched: {exc}") from None
    try:
        document = response.json()
    except ValueError:
        raise ProviderError(f"ETT_OIDC_ISSUER: {url} is not JSON (is ETT_OIDC_ISSUER the "
                            f"issuer, not the provider's home page?)") from None
    return parse(document, config, url)


def parse(document: Any, config: SsoConfig, url: str) -> Provider:
    """The endpoints of a discovery document that is about ``config.issuer``."""
    if not isinstance(document, dict):
        raise ProviderError(f"ETT_OIDC_ISSUER: {url} is not a JSON object")
    issuer = document.get("issuer")
    if not isinstance(issuer, str) or issuer.rstrip("/") != config.issuer.rstrip("/"):
        raise ProviderError(
            f"ETT_OIDC_ISSUER: {url} is the discovery document of issuer {issuer!r}, not "
            f"{config.issuer!r}; set ETT_OIDC_ISSUER to the provider's issuer exactly")
    algorithms = document.get("id_token_signing_alg_values_supported")
    if isinstance(algorithms, list) and config.sign_algorithm not in algorithms:
        raise ProviderError(
            f"ETT_OIDC_SIGN_ALGO: the provider signs ID tokens with "
            f"{', '.join(map(str, algorithms))}, not {config.sign_algorithm}")
    userinfo = document.get("userinfo_endpoint")
    methods = document.get("token_endpoint_auth_methods_supported")
    in_form = (isinstance(methods, list) and "client_secret_post" in methods
               and "client_secret_basic" not in methods)
    return Provider(issuer=issuer,
                    authorization_endpoint=_endpoint(document, "authorization_endpoint", url),
                    token_endpoint=_endpoint(document, "token_endpoint", url),
                    jwks_uri=_endpoint(document, "jwks_uri", url),
                    userinfo_endpoint=None if userinfo is None
                    else _endpoint(document, "userinfo_endpoint", url),
                    secret_in_form=in_form)


def _endpoint(document: dict[str, Any], key: str, url: str) -> str:
    value = document.get(key)
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https") \
            or not urlsplit(value).netloc:
        raise ProviderError(f"ETT_OIDC_ISSUER: {url} gives no http(s) URL for {key} "
                            f"(got {value!r})")
    return value
