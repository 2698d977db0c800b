"""``manage.py ett_login USERNAME [--role viewer|owner|admin] [--component NAME ...]
[--email ADDRESS]``: create (or reset) a dashboard login with a fresh password and exactly
that role.

Zero-setup installs have no user to log in with; this prints one, so nobody types a
password into a terminal history or ships a default one. The default role is admin, as the
demo's login has always been; ``--role owner`` needs the components the owner acts on.
``--email`` is where their weekly report goes: an owner with an address is subscribed to it
by default (without the option an existing address stays).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ettweb.access.roles import ADMIN, OWNER, ROLES, Role, set_role
from ettweb.components.known import known_components
from ettweb.reports.subscriptions import check_address


class Command(BaseCommand):
    help = ("Create or reset a login with a random password and a role (admin unless "
            "--role says otherwise); the last line prints it.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, default=ADMIN,
                            help="viewer: reads everything; owner: also edits its components' "
                                 "rollouts and phase map; admin: everything (default)")
        parser.add_argument("--component", action="append", default=[], metavar="NAME",
                            help="a component an owner owns (repeat for more); owners only")
        parser.add_argument("--email", default=None, metavar="ADDRESS",
                            help="their address (an owner with one gets the weekly report by "
                                 "default); unchanged when not given")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"]
        role: Role = options["role"]
        components = _checked_components(role, options["component"])
        email = _checked_email(options["email"])
        password = secrets.token_urlsafe(12)
        user, created = User.objects.get_or_create(username=username)
        user.set_password(password)
        if email is not None:
            user.email = email
        user.save()
        set_role(user, role, components)
        owns = f", owner of {', '.join(components)}" if components else ""
        self.stdout.write(f"{'created' if created else 'reset'} login {username!r} "
                          f"({role}{owns})")
        self.stdout.write(f"login: {username} / {password}")


def _checked_components(role: Role, names: list[str]) -> list[str]:
    """An owner's components, each a known one; refused for other roles (it would mean
    nothing, and silently dropping it would hide a typo in a role)."""
    if role != OWNER:
        if names:
            raise CommandError(f"--component: only an owner owns components, not a {role}")
        return []
    if not names:
        raise CommandError("--component: an owner needs at least one component")
    known = known_components()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise CommandError(f"--component: unknown component {unknown[0]!r} "
                           f"(known: {', '.join(known)})")
    return sorted(set(names))


def _checked_email(address: str | None) -> str | None:
    """The address, trimmed, or a usage error naming it (a report to it would never arrive)."""
    if address is None:
        return None
    try:
        return check_address(address)
    except ValueError as exc:
        raise CommandError(f"--email: {exc}") from None
