"""``manage.py ett_api_token USERNAME [--name NAME] [--expires-in DAYS]``: issue a bearer token
for the API (last line), saying when it expires (or that it never does)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ettweb.access.tokens import MAX_EXPIRES_IN_DAYS, issue_token, when


def _days(text: str) -> int:
    """``--expires-in``'s value: whole days, 1 to MAX_EXPIRES_IN_DAYS; else one line naming it."""
    try:
        days = int(text)
    except ValueError:
        days = 0
    if not 1 <= days <= MAX_EXPIRES_IN_DAYS:
        raise CommandError(f"--expires-in: must be a whole number of days from 1 to "
                           f"{MAX_EXPIRES_IN_DAYS}, not {text!r}", returncode=2)
    return days


class Command(BaseCommand):
    help = ("Issue an API token for USERNAME and print it on the last line. Only a hash is "
            "stored: keep the token in your deploy pipeline's secrets; revoke it in the admin "
            "(API tokens → untick active).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="an existing user (ett_login creates one)")
        parser.add_argument("--name", default="",
                            help="what the token is for, shown in the admin")
        parser.add_argument("--expires-in", metavar="DAYS", default=None,
                            help=f"refuse the token DAYS days from now (1 to "
                                 f"{MAX_EXPIRES_IN_DAYS}); default: it never expires")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        days = None if options["expires_in"] is None else _days(options["expires_in"])
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r} (create one with manage.py ett_login)")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        expires_at = None if days is None else timezone.now() + timedelta(days=days)
        token = issue_token(user, options["name"], expires_at=expires_at)
        lifetime = "never expires" if expires_at is None else f"expires {when(expires_at)}"
        self.stdout.write(f"API token for {username}, {lifetime} (shown once; send it as "
                          "'Authorization: Bearer <token>'):")
        self.stdout.write(token)
