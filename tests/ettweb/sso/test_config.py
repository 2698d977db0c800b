"""Single sign-on's settings: a half-configured provider stops start-up with one line naming
the variable, production wants TLS and stays clean under ``check --deploy``, and the
discovery document is checked before it is used."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from ettweb.sso.config import check
from ettweb.sso.discovery import Provider, discover, discovery_url, parse
from ettweb.sso.errors import ProviderError
from tests.ettweb.sso.provider import MockProvider, running_provider
from tests.ettweb.sso.test_claims import CONFIG
from tests.ettweb.test_security import REPO, _deploy_env, _production

ISSUER = "https://login.example.com"
URL = discovery_url(ISSUER)
DOCUMENT: dict[str, Any] = {
    "issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize",
    "token_endpoint": f"{ISSUER}/token", "jwks_uri": f"{ISSUER}/jwks",
    "userinfo_endpoint": f"{ISSUER}/userinfo",
    "id_token_signing_alg_values_supported": ["RS256", "ES256"]}


def test_nothing_is_checked_while_sso_is_off() -> None:
    check(None, None, None, [], "HS256", "")


@pytest.mark.parametrize(("arguments", "message"), [
    ((None, "s", ["openid"], "RS256", "p:"),
     "ETT_OIDC_CLIENT_ID: required when ETT_OIDC_ISSUER is set (single sign-on); the identity "
     "provider shows it when ETT is registered as a client"),
    (("c", None, ["openid"], "RS256", "p:"), "ETT_OIDC_CLIENT_SECRET: required when "),
    (("c", "s", ["email", "profile"], "RS256", "p:"),
     "ETT_OIDC_SCOPES: must include openid (without it there is no ID token), got "
     "'email profile'"),
    (("c", "s", ["openid"], "HS256", "p:"),
     "ETT_OIDC_SIGN_ALGO: must be one of RS256, RS384, RS512, ES256, ES384, ES512, PS256, "
     "PS384, PS512, not 'HS256'"),
    (("c", "s", ["openid"], "RS256", ""), "ETT_OIDC_OWNER_GROUP_PREFIX: must not be empty"),
], ids=["client-id", "client-secret", "scopes", "algorithm", "prefix"])
def test_a_half_configured_provider_is_refused_naming_the_variable(
        arguments: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        check(ISSUER, *arguments)
    assert str(caught.value).startswith(message)


def test_production_refuses_a_provider_without_its_secret() -> None:
    proc = _production([str(REPO / "manage.py"), "check"],
                       **_deploy_env(ETT_OIDC_ISSUER=ISSUER, ETT_OIDC_CLIENT_ID="ett"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "configuration error: ETT_OIDC_CLIENT_SECRET: required when ETT_OIDC_ISSUER is set "
        "(single sign-on); the identity provider shows it when ETT is registered as a client"]


def test_production_refuses_a_plain_http_issuer() -> None:
    proc = _production([str(REPO / "manage.py"), "check"], **_deploy_env(
        ETT_OIDC_ISSUER="http://login.example.com", ETT_OIDC_CLIENT_ID="ett",
        ETT_OIDC_CLIENT_SECRET="s"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "configuration error: ETT_OIDC_ISSUER: must be an https:// URL in production (the "
        "client secret and the ID tokens travel to and from it)"]


@pytest.mark.slow
def test_check_deploy_stays_clean_with_sso_and_its_secret_in_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "oidc-secret"
    secret.write_text(secrets.token_urlsafe(32) + "\n")
    proc = _production([str(REPO / "manage.py"), "check", "--deploy", "--fail-level",
                        "WARNING"], **_deploy_env(
        ETT_OIDC_ISSUER=ISSUER, ETT_OIDC_CLIENT_ID="ett",
        ETT_OIDC_CLIENT_SECRET_FILE=str(secret), ETT_OIDC_ADMIN_GROUPS="ett-admins,sre",
        ETT_OIDC_VIEWER_GROUPS="ett-users"))
    assert proc.returncode == 0, proc.stderr
    assert "System check identified no issues" in proc.stdout


def test_a_good_discovery_document_gives_the_endpoints() -> None:
    assert parse(DOCUMENT, CONFIG, URL) == Provider(
        issuer=ISSUER, authorization_endpoint=f"{ISSUER}/authorize",
        token_endpoint=f"{ISSUER}/token", jwks_uri=f"{ISSUER}/jwks",
        userinfo_endpoint=f"{ISSUER}/userinfo", secret_in_form=False)
    bare = {key: value for key, value in DOCUMENT.items()
            if key not in ("userinfo_endpoint", "id_token_signing_alg_values_supported")}
    found = parse({**bare, "token_endpoint_auth_methods_supported": ["client_secret_post"]},
                  CONFIG, URL)
    assert (found.userinfo_endpoint, found.secret_in_form) == (None, True)


@pytest.mark.parametrize(("document", "message"), [
    ([], f"ETT_OIDC_ISSUER: {URL} is not a JSON object"),
    ({**DOCUMENT, "issuer": "https://elsewhere.example.com"},
     f"ETT_OIDC_ISSUER: {URL} is the discovery document of issuer "
     f"'https://elsewhere.example.com', not '{ISSUER}'; set ETT_OIDC_ISSUER to the provider's "
     f"issuer exactly"),
    ({**DOCUMENT, "token_endpoint": None},
     f"ETT_OIDC_ISSUER: {URL} gives no http(s) URL for token_endpoint (got None)"),
    ({**DOCUMENT, "jwks_uri": "file:///etc/keys"},
     f"ETT_OIDC_ISSUER: {URL} gives no http(s) URL for jwks_uri (got 'file:///etc/keys')"),
    ({**DOCUMENT, "id_token_signing_alg_values_supported": ["HS256"]},
     "ETT_OIDC_SIGN_ALGO: the provider signs ID tokens with HS256, not RS256"),
], ids=["not-object", "other-issuer", "no-token-endpoint", "bad-jwks", "algorithm"])
def test_a_bad_discovery_document_is_refused_naming_the_setting(document: Any,
                                                                 message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        parse(document, CONFIG, URL)
    assert (str(caught.value), caught.value.status) == (message, 502)


def test_an_issuer_given_with_a_trailing_slash_still_matches() -> None:
    assert parse({**DOCUMENT, "issuer": f"{ISSUER}/"}, CONFIG, URL).issuer == f"{ISSUER}/"


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockProvider]:
    with running_provider(tmp_path_factory.mktemp("idp")) as started:
        yield started


def test_a_real_provider_is_discovered(idp: MockProvider) -> None:
    found = discover(replace(CONFIG, issuer=idp.issuer))
    assert (found.issuer, found.token_endpoint, found.jwks_uri) == (
        idp.issuer, f"{idp.issuer}/oauth2/token", f"{idp.issuer}/jwks")
    with pytest.raises(ProviderError, match=r"^ETT_OIDC_ISSUER: the provider's discovery "
                                            r"document .*/nested/\.well-known/openid-"
                                            r"configuration cannot be fetched: 404"):
        discover(replace(CONFIG, issuer=f"{idp.issuer}/nested"))
