"""The ID token checks the library leaves out, on real tokens from a real provider process:
signature, issuer, audience, expiry and nonce, each refused naming the claim.

Tokens are the provider's own (a code flow run with ``requests``), altered or re-signed
where a test needs a forgery.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from ettweb.sso.backends import SsoBackend
from ettweb.sso.config import sso_config
from ettweb.sso.discovery import provider
from ettweb.sso.errors import ProviderError, Refused
from tests.ettweb.sso.provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    MockProvider,
    query,
    running_provider,
)

NONCE = "nonce-of-this-browser"


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockProvider]:
    with running_provider(tmp_path_factory.mktemp("idp")) as started:
        started.set_person("sub-ann", preferred_username="ann", groups=["ett-admins"])
        yield started


def id_token(idp: MockProvider, client_id: str = CLIENT_ID, nonce: str = NONCE) -> str:
    """A real ID token for ``sub-ann``, issued to ``client_id``."""
    redirect = "http://testserver/accounts/sso/callback/"
    authorize = requests.Request("GET", f"{idp.issuer}/oauth2/authorize", params={
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
        "scope": "openid profile", "state": "s", "nonce": nonce}).prepare().url
    assert authorize is not None
    code = query(idp.approve(authorize, "sub-ann"))["code"]
    answer = requests.post(f"{idp.issuer}/oauth2/token", timeout=10, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect,
        "client_id": client_id, "client_secret": CLIENT_SECRET})
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["id_token"]
    return token


def backend_for(idp: MockProvider) -> SsoBackend:
    """ETT's backend as a callback from ``idp`` sets it up (inside ``idp.settings()``)."""
    backend = SsoBackend()
    config = sso_config()
    assert config is not None
    backend.config, backend.provider = config, provider(config)
    backend.OIDC_OP_TOKEN_ENDPOINT = backend.provider.token_endpoint
    return backend


def verified(idp: MockProvider, token: str, nonce: str = NONCE) -> dict[str, Any]:
    """What ETT's backend makes of ``token`` (as a callback for ``nonce`` would)."""
    with idp.settings():
        claims: dict[str, Any] = backend_for(idp).verify_token(token, nonce=nonce)
        return claims


def refused(idp: MockProvider, token: str, nonce: str = NONCE) -> str:
    with pytest.raises(Refused) as caught:
        verified(idp, token, nonce)
    assert caught.value.status == 400
    return str(caught.value)


def _part(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_the_providers_token_for_this_browser_is_accepted(idp: MockProvider) -> None:
    claims = verified(idp, id_token(idp))
    assert (claims["sub"], claims["aud"], claims["iss"]) == ("sub-ann", [CLIENT_ID], idp.issuer)
    assert claims["groups"] == ["ett-admins"]


def test_a_token_for_another_browsers_sign_in_is_refused(idp: MockProvider) -> None:
    assert refused(idp, id_token(idp), nonce="another-nonce") == (
        "ID token: claim nonce is not this browser's sign-in (a token replayed or issued for "
        "another sign-in); start again")


def test_a_token_issued_to_another_client_is_refused(idp: MockProvider) -> None:
    assert refused(idp, id_token(idp, client_id="someone-else")) == (
        "ID token: claim aud does not name ETT_OIDC_CLIENT_ID (issued to another client)")


def test_a_changed_token_is_refused(idp: MockProvider) -> None:
    header, payload, signature = id_token(idp).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["ett-admins", "ett-owner:everything"]
    forged = ".".join([header, _part(claims), signature])
    assert refused(idp, forged) == (
        "ID token: the signature does not verify with the provider's key (forged?)")


def test_a_token_signed_with_another_key_is_refused(idp: MockProvider) -> None:
    """This provider names no key in its tokens (so the key it publishes is tried); a
    forger naming that key, or one of their own, fares no better."""
    real = jwt.decode(id_token(idp), options={"verify_signature": False})
    published = requests.get(f"{idp.issuer}/jwks", timeout=10).json()["keys"][0]["kid"]
    ours = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for headers in ({}, {"kid": published}):
        forged = jwt.encode(real, ours, algorithm="RS256", headers=headers)
        assert refused(idp, forged) == (
            "ID token: the signature does not verify with the provider's key (forged?)")
    other_kid = jwt.encode(real, ours, algorithm="RS256", headers={"kid": "mine"})
    assert refused(idp, other_kid) == (
        "ID token: signed with key 'mine', which the provider does not publish (a forged "
        "token, or its keys just changed: start again)")


def test_an_unsigned_or_garbled_token_is_refused(idp: MockProvider) -> None:
    real = jwt.decode(id_token(idp), options={"verify_signature": False})
    unsigned = ".".join([_part({"alg": "none", "typ": "JWT"}), _part(real), ""])
    assert refused(idp, unsigned) == "ID token: signed with 'none', not ETT_OIDC_SIGN_ALGO RS256"
    assert refused(idp, "not-a-token") == "ID token: not a JSON Web Token"


def test_client_credentials_the_provider_does_not_know_name_the_settings(
        tmp_path: Path) -> None:
    """A provider that knows only registered clients answers the token request with
    invalid_client: ETT's client ID or secret is wrong, the operator's to fix (502)."""
    with (running_provider(tmp_path, "--require-registration") as strict, strict.settings(),
          pytest.raises(ProviderError) as caught):
        backend_for(strict).get_token({
            "grant_type": "authorization_code", "code": "any", "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET, "redirect_uri": "http://testserver/cb"})
    assert (str(caught.value), caught.value.status) == (
        "the provider refused ETT's client credentials (invalid_client): check "
        "ETT_OIDC_CLIENT_ID and ETT_OIDC_CLIENT_SECRET", 502)
