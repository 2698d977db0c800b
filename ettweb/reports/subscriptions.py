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


class AddressRefused(ValueError):
    """An address this editor may not send reports to; ``str`` is the reason."""


#: Who sets an account's address: the only places ETT takes one it can vouch for.
ACCOUNT_ADDRESS_SETTERS = ("an admin sets it (admin: Users, or manage.py ett_login NAME "
                           "--email ADDRESS) or your identity provider does at sign-in")


def allowed_address(subscription: Subscription, address: str, *, by_admin: bool) -> str:
    """The address ``subscription`` may send to when ``address`` is asked for; else
    :class:`AddressRefused` (or a ValueError for a malformed one) naming it.

    "Verified" here means vouched for by someone other than the subscriber: the account's
    own address (set by an admin, ``ett_login --email`` or the identity provider's ``email``
    claim at every sign-in; nobody edits their own), or one an admin put on the
    subscription. An admin (``by_admin``) may set any valid address; anyone else keeps the
    account's address or the admin's. Why: any viewer could direct the fleet report to any
    address, e.g. outside the company (issue 40, item 4a).
    """
    address = address.strip()
    account = (subscription.user.email or "").strip()
    if by_admin:
        return check_address(address)
    if subscription.pk and subscription.email_from_admin and address == subscription.email:
        return address  # the admin's choice stays
    if not account:
        raise AddressRefused("your account has no e-mail address, so the report has nowhere "
                             f"to go; {ACCOUNT_ADDRESS_SETTERS}")
    if address != account:
        raise AddressRefused(f"{address!r} is not your account's address ({account}): reports "
                             "go only there, or to an address an admin sets for you")
    return check_address(address)


def follow_account_address(user: User) -> int:
    """Point ``user``'s subscription at their account's new address, unless an admin set
    the subscription's own (``email_from_admin``); an emptied address leaves it as it was
    (the next one set is followed). Called whenever a user is saved; returns rows changed."""
    address = (user.email or "").strip()
    if not address:
        return 0
    return (Subscription.objects.filter(user=user, email_from_admin=False)
            .exclude(email=address).update(email=address))


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
