"""API tokens may expire (issue 40, design point 5h: tokens never expired).

The expiry is set when the token is issued (``ett_api_token --expires-in DAYS``), shown then
and in the admin's token list, and an expired token is refused with a 401 that says when it
expired, by the API, the API's docs and ``/metrics`` alike.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token
from ettweb.api.models import ApiToken

pytestmark = pytest.mark.django_db

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


def issue(*args: str) -> list[str]:
    out = StringIO()
    call_command("ett_api_token", *args, stdout=out)
    return out.getvalue().splitlines()


def test_the_expiry_is_set_and_shown_on_creation(alice: User) -> None:
    before = timezone.now()
    heading, token = issue("alice", "--name", "ci", "--expires-in", "30")
    row = ApiToken.objects.get()
    assert row.expires_at is not None
    assert timedelta(days=30) <= row.expires_at - before < timedelta(days=30, minutes=1)
    stamp = f"{row.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    assert heading == (f"API token for alice, expires {stamp} (shown once; send it as "
                       "'Authorization: Bearer <token>'):")
    assert token.startswith("ett_") and row.prefix == token[:10]

    heading, _ = issue("alice")
    assert heading.startswith("API token for alice, never expires (shown once;")
    assert ApiToken.objects.filter(expires_at__isnull=True).count() == 1


@pytest.mark.parametrize("days", ["0", "-1", "3651", "ten", "1.5"])
def test_a_bad_expiry_is_refused_naming_the_flag(alice: User, days: str) -> None:
    with pytest.raises(CommandError) as refused:
        issue("alice", "--expires-in", days)
    assert str(refused.value) == (f"--expires-in: must be a whole number of days from 1 to "
                                  f"3650, not {days!r}")
    assert refused.value.returncode == 2
    assert not ApiToken.objects.exists()


def test_a_past_expiry_is_never_issued(alice: User) -> None:
    with pytest.raises(ValueError, match=r"expires_at: .* has passed"):
        issue_token(alice, "ci", expires_at=timezone.now() - timedelta(seconds=1))


def test_an_expired_token_is_refused_saying_when(alice: User, client: Client) -> None:
    token = issue_token(alice, "ci", expires_at=timezone.now() + timedelta(days=1))
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.get("/api/v1/rollouts", **bearer).status_code == 200
    assert client.get("/metrics", **bearer).status_code == 200
    expired_at = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    ApiToken.objects.update(expires_at=expired_at)
    reason = (f"bearer token: {token[:10]}… expired on 2026-12-01 08:30 UTC; ask an admin "
              f"for a new one (python manage.py ett_api_token alice --expires-in DAYS)")

    for path in ("/api/v1/rollouts", "/api/v1/jobs", reverse("api-v1:openapi-json")):
        response = client.get(path, **bearer)
        assert response.status_code == 401, path
        assert response.json() == {"error": reason}, path
    post = client.post("/api/v1/rollouts", "{}", content_type="application/json", **bearer)
    assert post.status_code == 401 and post.json() == {"error": reason}
    scrape = client.get("/metrics", **bearer)
    assert scrape.status_code == 401 and scrape.content.decode() == f"{reason}\n"
    assert ApiToken.objects.get().expires_at == expired_at  # refusing writes nothing


def test_the_token_list_shows_each_expiry(alice: User, client: Client) -> None:
    admin = User.objects.create_user("ada")
    set_role(admin, "admin")
    client.force_login(admin)
    issue_token(alice, "forever")
    issue_token(alice, "soon", expires_at=datetime(2099, 1, 2, 3, 4, tzinfo=UTC))
    issue_token(alice, "gone", expires_at=timezone.now() + timedelta(days=1))
    ApiToken.objects.filter(name="gone").update(expires_at=datetime(2026, 1, 1, tzinfo=UTC))
    page = client.get("/admin/api/apitoken/").content.decode()
    assert 'class="field-expiry">never<' in page
    assert 'class="field-expiry">expires 2099-01-02 03:04 UTC<' in page
    assert 'class="field-expiry">expired 2026-01-01 00:00 UTC<' in page
    expired = client.get("/admin/api/apitoken/?expiry=past").content.decode()
    assert "gone" in expired and "forever" not in expired and "soon" not in expired
    assert STAMP.search(expired)
