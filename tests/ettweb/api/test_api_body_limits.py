"""A body too big for the API is refused with the API's JSON error, not Django's HTML page.

Issue 40, item 4d: a 3 MB POST to ``/api/v1/rollouts`` answered an HTML 400. Django raises
``RequestDataTooBig`` when the body is first read, inside the operation; ``ettweb.api.errors``
answers it (and too many form fields or files) as ``{"error": "body: ..."}`` with a 413.
"""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token
from ettweb.rollouts.models import Rollout

pytestmark = pytest.mark.django_db

THREE_MB = 3 << 20
LIMIT = "2,621,440-byte limit (DATA_UPLOAD_MAX_MEMORY_SIZE); send less"


@pytest.fixture
def owner() -> User:
    user = User.objects.create_user("olga")
    set_role(user, "owner", ["checkpointing"])
    return user


def test_a_3_mb_json_rollout_is_a_413_json_error(client: Client, owner: User) -> None:
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440 < THREE_MB
    body = json.dumps({"name": "x" * THREE_MB, "component": "checkpointing",
                       "at": "2026-10-12T09:30:00Z", "scope": {}})
    response = client.post("/api/v1/rollouts", body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {issue_token(owner, 'ci')}")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response.json() == {"error": f"body: {len(body)} bytes is over the {LIMIT}"}
    assert not Rollout.objects.exists()


def test_a_big_form_post_through_the_session_is_a_json_error_too(client: Client,
                                                                 owner: User) -> None:
    """A form body is read by the session's CSRF check, before the operation: the same
    answer."""
    client.force_login(owner)
    response = client.post("/api/v1/rollouts", {"name": "x" * THREE_MB})
    assert response.status_code == 413
    assert response.json()["error"].startswith("body: ")
    assert response.json()["error"].endswith(LIMIT)


def test_too_many_form_fields_are_a_json_error(owner: User) -> None:
    """A browser session's POST is read by its CSRF check first (as a browser's would be,
    the check enforced): too many fields is the API's error there too."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    browser.cookies["csrftoken"] = token = "a" * 32
    fields = {f"f{n}": "1" for n in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    response = browser.post("/api/v1/rollouts", {**fields, "csrfmiddlewaretoken": token})
    assert response.status_code == 413
    assert response.json() == {"error": "body: more fields than the 1000 allowed "
                                        "(DATA_UPLOAD_MAX_NUMBER_FIELDS)"}


def test_a_body_under_the_limit_is_read_as_before(client: Client, owner: User) -> None:
    body = json.dumps({"name": "async ckpt", "component": "checkpointing",
                       "at": "2026-10-12T09:30:00Z", "scope": {}, "notes": "n" * 10_000})
    response = client.post("/api/v1/rollouts", body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {issue_token(owner, 'ci')}")
    assert response.status_code in (201, 400), response.content[:300]
    assert response["Content-Type"].startswith("application/json")


def test_a_nul_in_an_api_parameter_is_the_apis_json_error(client: Client, owner: User) -> None:
    response = client.get("/api/v1/jobs?q=a%00b",
                          HTTP_AUTHORIZATION=f"Bearer {issue_token(owner, 'ci')}")
    assert response.status_code == 400
    assert response.json() == {"error": "bad request: NUL character in query parameter 'q'"}

