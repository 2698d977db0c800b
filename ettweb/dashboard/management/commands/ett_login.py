"""``manage.py ett_login USERNAME``: create (or reset) a dashboard login with a fresh password.

Zero-setup installs have no user to log in with; this prints one, so nobody types a
password into a terminal history or ships a default one.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create or reset a staff login with a random password; the last line prints it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        password = secrets.token_urlsafe(12)
        user, created = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"{'created' if created else 'reset'} login {username!r}")
        self.stdout.write(f"login: {username} / {password}")
