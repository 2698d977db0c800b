"""Subscription rules: what a subscription may hold, and who is subscribed by default.

Owners are people in a Django group named like a component's owner team (the Component
table's ``owner_team``). An owner with an e-mail address and no subscription yet gets one,
following their teams — that is "owners are subscribed by default". Someone who turned it
off keeps it off: defaults only ever create, never overwrite.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable, Sequence
from functools import cache

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from ettweb.components.models import Component
from ettweb.reports.models import Subscription


@cache
def time_zones() -> frozenset[str]:
    """Every IANA zone name the system knows (tzdata), e.g. ``Europe/Berlin``.

    Not Debian's ``localtime`` (a link to the server's own zone) nor tzdata's ``Factory``
    (no place at all): a subscriber's zone must not depend on the host.
    """
    return frozenset(zoneinfo.available_timezones() - {"localtime", "Factory"})


def check_time_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone, or a ValueError that names the bad value and the expected form."""
    if name not in time_zones():
        raise ValueError(f"unknown time zone {name!r} (use an IANA name like Europe/Berlin)")
    return zoneinfo.ZoneInfo(name)


def check_address(address: str) -> str:
    """A deliverable-looking address, or a ValueError naming it. Django's validator already
    wants a dotted domain (``bob@intranet`` is refused; ``localhost`` is allowed)."""
    address = address.strip()
    try:
        validate_email(address)
    except ValidationError:
        raise ValueError(f"{address!r} is not a valid e-mail address") from None
    return address


def owner_teams() -> list[str]:
    """Every team that owns a component, sorted."""
    teams = Component.objects.exclude(owner_team="").values_list("owner_team", flat=True)
    return sorted(set(teams))


def check_names(field: str, names: Iterable[str], allowed: Sequence[str]) -> list[str]:
    """``names`` deduplicated in order, each one of ``allowed``; else a ValueError naming it."""
    known, seen = set(allowed), []
    for name in names:
        if name not in known:
            raise ValueError(f"{field}: unknown {field[:-1]} {name!r}")
        if name not in seen:
            seen.append(name)
    return seen


def followed_components(subscription: Subscription) -> tuple[str, ...]:
    """The components a report lists first: the chosen ones, then those its teams own."""
    owned = (Component.objects.filter(owner_team__in=subscription.teams)
             .order_by("name").values_list("name", flat=True))
    names = list(subscription.components)
    names += [name for name in owned if name not in names]
    return tuple(names)


def default_teams(user: User) -> list[str]:
    """The owner teams a user belongs to (their Django groups named like an owner team)."""
    groups = set(user.groups.values_list("name", flat=True))
    return [team for team in owner_teams() if team in groups]


def new_subscription(user: User) -> Subscription:
    """An unsaved subscription with the defaults: the user's address, UTC, their teams."""
    return Subscription(user=user, email=user.email or "", time_zone="UTC",
                        enabled=True, fleet=True, components=[], teams=default_teams(user))


def ensure_owner_subscriptions() -> int:
    """Subscribe every owner who has a valid address and no subscription; returns how many."""
    teams = owner_teams()
    if not teams:
        return 0
    users = (get_user_model().objects.filter(groups__name__in=teams, is_active=True,
                                             report_subscription__isnull=True)
             .exclude(email="").distinct())
    created = 0
    for user in users:
        subscription = new_subscription(user)
        try:
            subscription.email = check_address(subscription.email)
        except ValueError:
            continue  # no usable address: the settings page asks them for one
        # get_or_create: two planners at once (beat and the command) must not both insert
        # (it retries the read on the unique user constraint instead of raising).
        _, made = Subscription.objects.get_or_create(user=user, defaults={
            "email": subscription.email, "time_zone": subscription.time_zone,
            "teams": subscription.teams})
        created += made
    return created
