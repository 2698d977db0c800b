"""The claim mapping: which role, components, username and address a sign-in's claims give,
and each malformed claim refused naming it (no provider needed: pure functions)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ettweb.access.roles import ADMIN, OWNER, VIEWER
from ettweb.sso.claims import Grant, grant
from ettweb.sso.config import SsoConfig
from ettweb.sso.errors import Refused

CONFIG = SsoConfig(
    issuer="https://login.example.com", client_id="ett", client_secret="s",
    provider_name="Example", scopes=("openid", "email"), groups_claim="groups",
    username_claim="preferred_username", admin_groups=frozenset({"ett-admins", "sre"}),
    owner_prefix="ett-owner:", viewer_groups=frozenset(), sign_algorithm="RS256",
    timeout_s=10.0)


def granted(groups: Any = None, config: SsoConfig = CONFIG, **claims: Any) -> Grant:
    base: dict[str, Any] = {"sub": "s1", "preferred_username": "pat", "email": "pat@example.com"}
    if groups is not None:
        base[config.groups_claim] = groups
    return grant({**base, **claims}, config)


def test_an_admin_group_makes_an_admin_whatever_else_they_hold() -> None:
    result = granted(["staff", "sre", "ett-owner:checkpointing"])
    assert (result.role, result.components) == (ADMIN, ())
    assert result.groups == ("ett-owner:checkpointing", "sre", "staff")


def test_owner_groups_make_an_owner_of_exactly_those_components() -> None:
    result = granted(["ett-owner:pt2_compiler", "ett-owner:checkpointing", "staff",
                      "ett-owner:checkpointing", "owner:scheduler"])
    assert (result.role, result.components) == (OWNER, ("checkpointing", "pt2_compiler"))


@pytest.mark.parametrize("groups", [None, [], ["staff"], "staff"],
                         ids=["no-claim", "empty", "unmapped", "lone-string"])
def test_anyone_else_is_a_viewer_while_no_viewer_groups_are_set(groups: Any) -> None:
    assert granted(groups).role == VIEWER


def test_viewer_groups_refuse_everyone_outside_every_mapped_group() -> None:
    config = replace(CONFIG, viewer_groups=frozenset({"ett-users"}))
    assert granted(["ett-users"], config).role == VIEWER
    assert granted(["sre"], config).role == ADMIN
    assert granted(["ett-owner:checkpointing"], config).role == OWNER
    with pytest.raises(Refused) as caught:
        granted(["staff", "contractors"], config)
    assert caught.value.status == 403
    assert str(caught.value) == (
        "claim groups: you are in contractors, staff, and ETT lets in only ett-admins, "
        "ett-users, sre (ETT_OIDC_VIEWER_GROUPS, ETT_OIDC_ADMIN_GROUPS) or a group starting "
        "'ett-owner:'; the identity provider's administrators add people to groups")
    with pytest.raises(Refused, match=r"^claim groups: you are in no group, "):
        granted(None, config)


def test_the_claim_names_are_settings() -> None:
    config = replace(CONFIG, groups_claim="roles", username_claim="email",
                     owner_prefix="/teams/")
    result = grant({"sub": "s1", "email": "pat@example.com", "roles": ["/teams/ckpt"]}, config)
    assert (result.username, result.role, result.components) == (
        "pat@example.com", OWNER, ("ckpt",))


@pytest.mark.parametrize(("claims", "message"), [
    ({"groups": {"a": 1}}, r"^claim groups: must be a list of group names, got \{'a': 1\}"),
    ({"groups": ["ok", 7]}, r"^claim groups: must be a list of group names"),
    ({"groups": ["ett-owner:"]},
     r"^claim groups: group 'ett-owner:' must name a component \(1 to 64 characters after "
     r"ETT_OIDC_OWNER_GROUP_PREFIX 'ett-owner:'\)$"),
    ({"groups": ["ett-owner:" + "c" * 65]}, r"^claim groups: group 'ett-owner:ccc"),
    ({"preferred_username": None}, r"^claim preferred_username: missing from the provider's "
                                   r"answer; set ETT_OIDC_USERNAME_CLAIM"),
    ({"preferred_username": 42}, r"^claim preferred_username: missing"),
    ({"preferred_username": "a/b"}, r"^claim preferred_username: 'a/b' is not a username"),
    ({"preferred_username": "p" * 151}, r"^claim preferred_username: 'ppp"),
    ({"email": "nope"}, r"^claim email: not an address: 'nope'$"),
    ({"email": ["pat@example.com"]}, r"^claim email: not an address"),
], ids=["groups-object", "groups-number", "empty-component", "long-component",
        "no-username", "username-number", "username-slash", "username-long", "email-bad",
        "email-list"])
def test_malformed_claims_are_refused_naming_the_claim(claims: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(Refused, match=message) as caught:
        granted(**claims)
    assert caught.value.status == 400


def test_no_email_claim_is_no_address() -> None:
    assert granted(email=None).email == ""
