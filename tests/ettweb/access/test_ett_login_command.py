"""``ett_login`` prints a working login; running it again resets the password."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import RequestFactory

pytestmark = pytest.mark.django_db


def _login(username: str) -> str:
    out = StringIO()
    call_command("ett_login", username, stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith(f"login: {username} / ")
    return last.rsplit(" / ", 1)[1]


def test_login_works_and_reset_replaces_password() -> None:
    # django-axes (first of AUTHENTICATION_BACKENDS) throttles by address: it needs a request.
    request = RequestFactory().post("/accounts/login/")
    first = _login("admin")
    assert authenticate(request, username="admin", password=first) is not None
    second = _login("admin")
    assert second != first
    assert authenticate(request, username="admin", password=first) is None
    user = authenticate(request, username="admin", password=second)
    assert user is not None and user.is_staff
