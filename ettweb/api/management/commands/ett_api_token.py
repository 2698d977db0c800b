"""``manage.py ett_api_token USERNAME``: issue a bearer token for the API (last line)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ettweb.access.tokens import issue_token


class Command(BaseCommand):
    help = ("Issue an API token for USERNAME and print it on the last line. Only a hash is "
            "stored: keep the token in your deploy pipeline's secrets; revoke it in the admin "
            "(API tokens → untick active).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="an existing user (ett_login creates one)")
        parser.add_argument("--name", default="",
                            help="what the token is for, shown in the admin")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r} (create one with manage.py ett_login)")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        token = issue_token(user, options["name"])
        self.stdout.write(f"API token for {username} (shown once; send it as "
                          "'Authorization: Bearer <token>'):")
        self.stdout.write(token)
