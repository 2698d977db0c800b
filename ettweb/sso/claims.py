"""What the provider's claims give a person in ETT: a username, an address and a role.

Pure functions of the claims and the settings, so every rule is tested without a provider.
The groups claim decides the role at every sign-in (:func:`grant`): a group change at the
provider takes effect at the person's next sign-in, and nothing granted by hand in ETT
outlives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from ettweb.access.models import ComponentOwner
from ettweb.access.roles import ADMIN, OWNER, VIEWER, Role
from ettweb.sso.config import SsoConfig
from ettweb.sso.errors import Refused

COMPONENT_MAX = ComponentOwner._meta.get_field("component").max_length or 64


@dataclass(frozen=True)
class Grant:
    """One sign-in's outcome: who (``username`` only names a new account) and what role."""

    username: str
    email: str
    role: Role
    components: tuple[str, ...]
    groups: tuple[str, ...]


def grant(claims: Mapping[str, Any], config: SsoConfig) -> Grant:
    """The role the claims give, or :class:`Refused` naming the claim at fault."""
    groups = groups_of(claims, config.groups_claim)
    owned = owned_components(groups, config)
    if config.admin_groups.intersection(groups):
        role: Role = ADMIN
    elif owned:
        role = OWNER
    elif not config.viewer_groups or config.viewer_groups.intersection(groups):
        role = VIEWER
    else:
        raise Refused(no_role(groups, config), status=403)
    return Grant(username=username_of(claims, config.username_claim), email=email_of(claims),
                 role=role, components=owned if role == OWNER else (), groups=groups)


def groups_of(claims: Mapping[str, Any], claim: str) -> tuple[str, ...]:
    """The groups claim as names: absent is none (providers leave it out for a person in no
    group), one string is one group (some providers send a lone value so)."""
    value = claims.get(claim)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Refused(f"claim {claim}: must be a list of group names, got {value!r}; check "
                      f"ETT_OIDC_GROUPS_CLAIM and the provider's groups mapping")
    return tuple(sorted(set(value)))


def owned_components(groups: tuple[str, ...], config: SsoConfig) -> tuple[str, ...]:
    """The components named by groups like ``ett-owner:checkpointing``.

    A component not known yet is accepted: a team's group may exist before its component
    reports anything, and ownership of a name nothing uses grants nothing.
    """
    names = [group.removeprefix(config.owner_prefix) for group in groups
             if group.startswith(config.owner_prefix)]
    for name in names:
        if not name.strip() or len(name) > COMPONENT_MAX:
            raise Refused(
                f"claim {config.groups_claim}: group {config.owner_prefix + name!r} must name "
                f"a component (1 to {COMPONENT_MAX} characters after "
                f"ETT_OIDC_OWNER_GROUP_PREFIX {config.owner_prefix!r})")
    return tuple(sorted(set(names)))


def no_role(groups: tuple[str, ...], config: SsoConfig) -> str:
    """Why someone the provider signed in may not use ETT, and who can change it."""
    held = ", ".join(groups) or "no group"
    allowed = sorted(config.viewer_groups | config.admin_groups)
    return (f"claim {config.groups_claim}: you are in {held}, and ETT lets in only "
            f"{', '.join(allowed)} (ETT_OIDC_VIEWER_GROUPS, ETT_OIDC_ADMIN_GROUPS) or a group "
            f"starting {config.owner_prefix!r}; the identity provider's administrators add "
            f"people to groups")


def username_of(claims: Mapping[str, Any], claim: str) -> str:
    """A new account's username: the claim's value if Django accepts it as one."""
    value = claims.get(claim)
    if not isinstance(value, str) or not value:
        raise Refused(f"claim {claim}: missing from the provider's answer; set "
                      f"ETT_OIDC_USERNAME_CLAIM to a claim it sends (e.g. email)")
    try:
        User._meta.get_field("username").run_validators(value)
    except ValidationError as exc:
        raise Refused(f"claim {claim}: {value!r} is not a username ETT accepts "
                      f"({' '.join(exc.messages)})") from None
    return value


def email_of(claims: Mapping[str, Any]) -> str:
    """The address weekly reports go to; none when the provider sends none."""
    value = claims.get("email")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused(f"claim email: not an address: {value!r}")
    try:
        validate_email(value)
    except ValidationError:
        raise Refused(f"claim email: not an address: {value!r}") from None
    return value
