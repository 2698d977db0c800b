"""Subscription rules: what a subscription may hold, and who is subscribed by default.

Owners are whoever the owner role says (``ettweb.access.roles``: the ``owner`` group and
their ``ComponentOwner`` rows), the same people the component pages list and who edit those
components. An owner of at least one component with an e-mail address and no subscription
yet gets one that lists the components they own first — that is "owners are subscribed by
default". Someone who turned it off keeps it off: defaults only ever create, never
overwrite. A component's owner team is a label for people to read; nothing here follows it.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable, Sequence
from functools import cache

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from ettweb.access.roles import owned_components, owners
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
    """The components a report lists first: the chosen ones, then (``owned``) those its user
    owns now, by name. Read for each report, so taking the owner role away takes them off."""
    names = list(subscription.components)
    if subscription.owned:
        names += [name for name in sorted(owned_components(subscription.user))
                  if name not in names]
    return tuple(names)


def new_subscription(user: User) -> Subscription:
    """An unsaved subscription with the defaults: the user's address, UTC, the whole fleet,
    and the components they own (none chosen)."""
    return Subscription(user=user, email=user.email or "", time_zone="UTC",
                        enabled=True, fleet=True, components=[], owned=True)


def default_owner_subscriptions() -> list[Subscription]:
    """The subscriptions owners get by default, unsaved: every owner who owns a component,
    has a valid address and no subscription yet (the planner saves them; ``send_weekly_reports
    --dry-run`` only counts them, which is how it counts exactly what the real run sends)."""
    users = (owners().filter(owned_components__isnull=False, report_subscription__isnull=True)
             .exclude(email="").distinct().order_by("pk"))
    found = []
    for user in users:
        try:
            address = check_address(user.email)
        except ValueError:
            continue  # no usable address: the settings page asks them for one
        subscription = new_subscription(user)
        subscription.email = address
        found.append(subscription)
    return found


def save_default_subscriptions(defaults: Iterable[Subscription]) -> list[tuple[Subscription,
                                                                               bool]]:
    """Save ``defaults`` (from :func:`default_owner_subscriptions`); each row now in the
    database (a concurrent planner's, if it got there first) and whether this call made it."""
    saved = []
    for template in defaults:
        # get_or_create: two planners at once (beat and the command) must not both insert
        # (it retries the read on the unique user constraint instead of raising).
        saved.append(Subscription.objects.get_or_create(user=template.user, defaults={
            "email": template.email, "time_zone": template.time_zone, "fleet": template.fleet,
            "owned": template.owned}))
    return saved


def ensure_owner_subscriptions() -> int:
    """Subscribe every owner who owns a component, has a valid address and no subscription;
    returns how many."""
    return sum(made for _, made in save_default_subscriptions(default_owner_subscriptions()))
