"""The authentication backend of single sign-on: mozilla-django-oidc's code flow, with
ETT's checks on the ID token and ETT's rules for accounts and roles.

The library's flow (exchange the code, verify the ID token, read userinfo, find or make the
user) is kept; what it leaves out is added here: the ID token's issuer, audience and expiry
are checked (the library checks only the signature), a person is their (issuer, subject)
(the library matches e-mail addresses), the role is set from the groups claim at every
sign-in, and every failure is a :class:`Refused` naming what failed, which the callback view
shows, instead of a silent redirect or a 500.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote_plus

import jwt
import requests
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from ettweb.sso.accounts import sign_in
from ettweb.sso.claims import grant
from ettweb.sso.config import SsoConfig, sso_config
from ettweb.sso.discovery import Provider, provider
from ettweb.sso.errors import ProviderError, Refused
from ettweb.sso.library import library_setting

#: Clock difference tolerated between ETT and the provider for exp and iat.
LEEWAY_S: Final = 60
#: The ID token claims OpenID Connect requires, checked present before anything else.
REQUIRED_CLAIMS: Final = ["iss", "sub", "aud", "exp", "iat"]


class SsoBackend(OIDCAuthenticationBackend):
    """Signs in the person the provider's ID token names; nobody else."""

    config: SsoConfig
    provider: Provider

    def __init__(self) -> None:
        # Not the library's __init__: it reads endpoint settings that discovery supplies at
        # sign-in, and Django makes a backend for every log-in and every request's user.
        self.UserModel = User

    def get_settings(self, attr: str, *default: Any) -> Any:
        return library_setting(self.config, attr, *default)

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> User | None:
        """The user of a callback (``nonce`` among the credentials: only the callback view
        passes it); None for a username and password, left to the other backends."""
        config = sso_config()
        if request is None or config is None or "nonce" not in credentials:
            return None
        self.config, self.provider = config, provider(config)
        self.OIDC_OP_TOKEN_ENDPOINT = self.provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = self.provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = self.provider.jwks_uri
        self.OIDC_RP_CLIENT_ID = config.client_id
        self.OIDC_RP_CLIENT_SECRET = config.client_secret
        self.OIDC_RP_SIGN_ALGO = config.sign_algorithm
        self.OIDC_RP_IDP_SIGN_KEY = None
        user: User | None = super().authenticate(request, **credentials)
        if user is None:
            raise Refused("code and state parameters: the callback needs both; start again "
                          "from the log-in page")
        return user

    def get_user(self, user_id: Any) -> User | None:
        """The session's user while active: the library's answer ignores ``is_active``, so
        a deactivated person would keep their open sessions."""
        user: User | None = ModelBackend.get_user(self, user_id)
        return user

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The token endpoint's answer to the code; its refusal says why."""
        auth = None
        if not self.provider.secret_in_form:
            # RFC 6749 §2.3.1: each part form-encoded before it goes into Basic.
            auth = (quote_plus(self.config.client_id), quote_plus(self.config.client_secret))
            payload = {key: value for key, value in payload.items() if key != "client_secret"}
        try:
            response = requests.post(self.OIDC_OP_TOKEN_ENDPOINT, data=payload, auth=auth,
                                     timeout=self.config.timeout_s)
        except requests.RequestException as exc:
            raise ProviderError(f"ETT_OIDC_ISSUER: the token endpoint "
                                f"{self.OIDC_OP_TOKEN_ENDPOINT} cannot be reached: {exc}"
                                ) from None
        answer = _json_object(response)
        if response.status_code != 200:
            raise _token_refusal(response.status_code, answer)
        if not isinstance(answer.get("id_token"), str):
            raise ProviderError("the provider's token response has no id_token; is openid "
                                "in ETT_OIDC_SCOPES and the client an OpenID Connect one?")
        return answer

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims, if its signature, issuer, audience, expiry and nonce hold."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused("ID token: not a JSON Web Token") from None
        algorithm = header.get("alg")
        if algorithm != self.config.sign_algorithm:
            raise Refused(f"ID token: signed with {algorithm!r}, not ETT_OIDC_SIGN_ALGO "
                          f"{self.config.sign_algorithm}")
        key = self._signing_key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[self.config.sign_algorithm],
                audience=self.config.client_id, issuer=self.provider.issuer, leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS})
        except jwt.PyJWTError as exc:
            raise Refused(_token_problem(exc)) from None
        if claims.get("nonce") != kwargs.get("nonce"):
            raise Refused("ID token: claim nonce is not this browser's sign-in (a token "
                          "replayed or issued for another sign-in); start again")
        return claims

    def get_userinfo(self, access_token: str, id_token: str,
                     payload: dict[str, Any]) -> dict[str, Any]:
        """The userinfo endpoint's claims (none when the provider has no such endpoint)."""
        if self.OIDC_OP_USER_ENDPOINT is None:
            return {}
        try:
            response = requests.get(self.OIDC_OP_USER_ENDPOINT, timeout=self.config.timeout_s,
                                    headers={"Authorization": f"Bearer {access_token}"})
            response.raise_for_status()
        except requests.RequestException as exc:
            raise ProviderError(f"ETT_OIDC_ISSUER: the userinfo endpoint "
                                f"{self.OIDC_OP_USER_ENDPOINT} failed: {exc}") from None
        answer = _json_object(response)
        if not answer:
            raise ProviderError("the provider's userinfo answer is not a JSON object (signed "
                                "userinfo is not read: set the client to answer JSON)")
        if answer.get("sub") != payload["sub"]:
            raise Refused("claim sub: userinfo names another subject than the ID token")
        return answer

    def get_or_create_user(self, access_token: str, id_token: str,
                           payload: dict[str, Any]) -> User:
        """The account of the ID token's subject, with the role its claims grant now."""
        claims = {**payload, **self.get_userinfo(access_token, id_token, payload)}
        return sign_in(self.provider.issuer, payload["sub"], grant(claims, self.config),
                       self.config.username_claim)

    def _signing_key(self, kid: Any) -> jwt.PyJWK:
        """The provider's published key the ID token names (by ``kid``, when it names one)."""
        uri = self.provider.jwks_uri
        try:
            response = requests.get(uri, timeout=self.config.timeout_s)
            response.raise_for_status()
            keys = response.json()["keys"]
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise ProviderError(f"ETT_OIDC_ISSUER: the provider's keys ({uri}) cannot be "
                                f"read: {exc}") from None
        algorithm = self.config.sign_algorithm
        matching = [key for key in keys if isinstance(key, dict)
                    and (kid is None or key.get("kid") == kid)
                    and key.get("alg", algorithm) == algorithm and key.get("use", "sig") == "sig"]
        if not matching:
            raise Refused(f"ID token: signed with key {kid!r}, which the provider does not "
                          f"publish (a forged token, or its keys just changed: start again)")
        try:
            return jwt.PyJWK(matching[0], algorithm=algorithm)
        except jwt.PyJWTError as exc:
            raise ProviderError(f"ETT_OIDC_ISSUER: the provider's key {kid!r} is unusable: "
                                f"{exc}") from None


def _json_object(response: requests.Response) -> dict[str, Any]:
    """A response's JSON object; empty when it is not one."""
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _token_refusal(status: int, answer: dict[str, Any]) -> Refused:
    """The token endpoint's error (RFC 6749 §5.2) as a refusal naming what to fix."""
    error = str(answer.get("error", f"HTTP {status}"))
    if error == "invalid_client":
        return ProviderError("the provider refused ETT's client credentials (invalid_client): "
                             "check ETT_OIDC_CLIENT_ID and ETT_OIDC_CLIENT_SECRET")
    if status >= 500:
        return ProviderError(f"the provider's token endpoint failed ({error})")
    return Refused(f"code parameter: the provider refused it ({error}): it was used already, "
                   f"has expired, or belongs to another sign-in; start again")


def _token_problem(exc: jwt.PyJWTError) -> str:
    """What is wrong with an ID token, naming the claim."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "ID token: expired (claim exp is in the past); start again"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "ID token: claim aud does not name ETT_OIDC_CLIENT_ID (issued to another client)"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "ID token: claim iss is not ETT_OIDC_ISSUER's issuer"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"ID token: claim {exc.claim} is missing"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "ID token: claim iat or nbf is in the future (are the clocks apart?)"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "ID token: the signature does not verify with the provider's key (forged?)"
    return f"ID token: refused ({exc})"
