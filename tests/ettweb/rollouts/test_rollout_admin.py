"""The admin's rollout form runs the API's checks: same refusals, same words."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.rollouts.models import Rollout

pytestmark = pytest.mark.django_db

BASE = {"name": "compile cache", "component": "pt2_compiler", "at_0": "2026-03-10",
        "at_1": "12:00:00", "scope": '{"teams": ["ads"]}', "notes": "", "link": ""}


@pytest.fixture
def admin_client_(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "r@x.y", "pw"))
    return client


def test_admin_adds_a_valid_rollout(admin_client_: Client) -> None:
    response = admin_client_.post("/admin/rollouts/rollout/add/", BASE)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Rollout.objects.get().scope == {"teams": ["ads"]}


@pytest.mark.parametrize(("change", "message"), [
    ({"scope": '{"teams": []}'}, "scope.teams: given with no values"),
    ({"component": "nope"}, "component: unknown component &#x27;nope&#x27;"),
    ({"link": "ftp://x"}, "link: must be an http:// or https:// URL"),
])
def test_admin_refuses_what_the_api_refuses(admin_client_: Client, change: dict[str, str],
                                            message: str) -> None:
    response = admin_client_.post("/admin/rollouts/rollout/add/", {**BASE, **change})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Rollout.objects.exists()
