"""``ett_login`` prints a working login; running it again resets the password."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def _login(username: str) -> str:
    out = StringIO()
    call_command("ett_login", username, stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith(f"login: {username} / ")
    return last.rsplit(" / ", 1)[1]


def test_login_works_and_reset_replaces_password() -> None:
    first = _login("admin")
    assert authenticate(username="admin", password=first) is not None
    second = _login("admin")
    assert second != first
    assert authenticate(username="admin", password=first) is None
    user = authenticate(username="admin", password=second)
    assert user is not None and user.is_staff
