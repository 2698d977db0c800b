"""Requests a new user can type that used to be 500s (issue 13, defect 6): a date past what
a range can hold, and a NUL character (``%00``) that Postgres refuses in text. Each is a 400
naming the problem; pages beside them keep working."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token


@pytest.fixture
def user(db: None) -> User:
    return User.objects.create_user("viewer", is_staff=True)


@pytest.mark.parametrize(("path", "reason"), [
    ("/fleet/?date_to=9999-12-31",
     "date_to: must be a day from 1900-01-01 to 9999-12-30, not 9999-12-31"),
    ("/fleet/?date_from=1899-12-31&date_to=1900-01-05",
     "date_from: must be a day from 1900-01-01 to 9999-12-30, not 1899-12-31"),
    ("/components/checkpointing/?date_to=9999-12-31",
     "date_to: must be a day from 1900-01-01 to 9999-12-30"),
    ("/jobs/%00/", "bad request: NUL character in the path"),
    ("/components/%00/", "bad request: NUL character in the path"),
    ("/rollouts/?component=%00", "bad request: NUL character in query parameter 'component'"),
    ("/fleet/?a%00b=1", "bad request: NUL character in query parameter 'ab'"),
])
def test_pages_refuse_with_the_reason(client: Client, user: User, path: str,
                                      reason: str) -> None:
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 400, response.content[:300]
    assert reason in response.content.decode()


def test_the_api_refuses_nul_too(client: Client, user: User) -> None:
    token = issue_token(user, "nul test")
    response = client.get("/api/v1/rollouts?component=%00",
                          HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 400
    assert "NUL character in query parameter 'component'" in response.content.decode()


def test_good_requests_still_pass(client: Client, user: User) -> None:
    client.force_login(user)
    assert client.get("/fleet/?date_to=2026-03-15").status_code == 200
    assert client.get("/jobs/no-such-job/").status_code == 404
