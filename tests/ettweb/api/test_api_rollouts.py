"""The deploy-pipeline API: bearer tokens, rollouts in and out, impact, and every refusal."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from ettweb.access.tokens import issue_token
from ettweb.api.models import ApiToken
from ettweb.platform import deferred
from ettweb.queries import ImpactQuery, calculate
from ettweb.rollouts.models import Rollout
from tests.ettweb.queued import QueuedTask

pytestmark = pytest.mark.django_db

GOOD = {"name": "async checkpointing", "component": "checkpointing",
        "at": "2026-10-12T09:30:00Z", "scope": {"teams": ["ads"]}}


@pytest.fixture
def token() -> str:
    return issue_token(User.objects.create_user("deployer", is_superuser=True), "ci")


def post(client: Client, token: str | None, body: Any, raw: bool = False) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = body if raw else json.dumps(body)
    return client.post("/api/v1/rollouts", data=data, content_type="application/json",
                       **headers)


def get(client: Client, token: str | None, path: str) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.get(path, **headers)


def test_create_then_read_back(client: Client, token: str) -> None:
    response = post(client, token, {**GOOD, "notes": "rolled by CI", "link": "https://x.y/1"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["id"] == Rollout.objects.get().pk
    assert body["at"] == "2026-10-12T09:30:00Z"
    assert body["scope"] == {"teams": ["ads"]}
    assert body["created_by"] == "deployer"
    assert get(client, token, f"/api/v1/rollouts/{body['id']}").json() == body
    listed = get(client, token, "/api/v1/rollouts").json()
    assert [r["id"] for r in listed] == [body["id"]]
    assert get(client, token, "/api/v1/rollouts?component=evaluation").json() == []


def test_impact_endpoint_answers_the_spec_document(client: Client, token: str) -> None:
    rollout_id = post(client, token, GOOD).json()["id"]
    response = get(client, token, f"/api/v1/rollouts/{rollout_id}/impact?window=7")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["window_days"] == 7
    assert body["before"] == ["2026-10-05", "2026-10-11"]
    assert body["after"] is None and body["partial"] is True  # no data at all yet
    assert body["treated"]["jobs_before"] == 0 and body["treated"]["ci95_pts"] is None
    assert body["control"]["jobs_after"] == 0
    assert body["verdict"] == "inconclusive"


def test_impact_answer_carries_sections_6_1_to_6_4(client: Client, token: str) -> None:
    """§6.1's ``component_effect``, §6.2's ``adjusted``, §6.4's ``overlapping`` and what an
    inconclusive verdict needs are in the answer, as the API reference shows them. They were
    computed but never sent: the schema left them out and ninja cut the answer to it. The
    answer is the query's result, field for field."""
    rollout_id = post(client, token, GOOD).json()["id"]
    other = post(client, token, {**GOOD, "name": "second checkpoint change",
                                 "at": "2026-10-14T09:30:00Z"}).json()["id"]
    body = get(client, token, f"/api/v1/rollouts/{rollout_id}/impact?window=7").json()
    assert body["component_effect"]["component"] == "checkpointing"
    assert body["component_effect"]["verdict"] == "inconclusive"
    assert body["adjusted"]["method"] and body["adjusted"]["verdict"] == "inconclusive"
    assert [o["id"] for o in body["overlapping"]] == [other]
    assert body["overlapping"][0]["at"] == "2026-10-14T09:30:00Z"
    assert "inconclusive" in body
    result = calculate(ImpactQuery(rollout_id, window_days=7))
    assert result is not None
    assert body == json.loads(json.dumps(result.as_api()))


@pytest.mark.parametrize(("body", "field"), [
    ({**GOOD, "component": "ckpt"}, "component: unknown component 'ckpt'"),
    ({**GOOD, "name": "  "}, "name: must not be empty"),
    ({**GOOD, "scope": {"teams": []}}, "scope.teams: given with no values"),
    ({**GOOD, "scope": {"owners": ["x"]}}, "scope.owners: unknown field"),
    ({**GOOD, "scope": {"job_pattern": ""}}, "scope.job_pattern: values must not be empty"),
    ({**GOOD, "scope": ["ads"]}, "scope: Input should be a valid dictionary"),
    ({k: v for k, v in GOOD.items() if k != "name"}, "name: Field required"),
    ({**GOOD, "at": "yesterday"}, "at: Input should be a valid datetime"),
    ({**GOOD, "link": "javascript:alert(1)"}, "link: must be an http:// or https:// URL"),
    ({**GOOD, "colour": "red"}, "colour: Extra inputs are not permitted"),
])
def test_bad_rollouts_are_400_naming_the_field(client: Client, token: str, body: Any,
                                               field: str) -> None:
    response = post(client, token, body)
    assert response.status_code == 400
    assert field in response.json()["error"]
    assert not Rollout.objects.exists()


def test_unparseable_body_is_400(client: Client, token: str) -> None:
    response = post(client, token, "{not json", raw=True)
    assert response.status_code == 400
    assert "Cannot parse request body" in response.json()["error"]


@pytest.mark.parametrize("window", ["0", "91", "-3", "abc"])
def test_window_outside_1_to_90_is_400(client: Client, token: str, window: str) -> None:
    rollout_id = post(client, token, GOOD).json()["id"]
    response = get(client, token, f"/api/v1/rollouts/{rollout_id}/impact?window={window}")
    assert response.status_code == 400
    assert response.json()["error"].startswith("window:")


def test_unknown_rollout_is_404(client: Client, token: str) -> None:
    for path in ("/api/v1/rollouts/999", "/api/v1/rollouts/999/impact"):
        response = get(client, token, path)
        assert response.status_code == 404
        assert response.json() == {"error": "no rollout 999"}


def test_tokens_are_required_hashed_and_revocable(
        client: Client, token: str, queued: Callable[[], list[QueuedTask]]) -> None:
    assert post(client, None, GOOD).status_code == 401
    assert post(client, "ett_wrong", GOOD).status_code == 401
    assert get(client, None, "/api/v1/rollouts").status_code == 401
    stored = ApiToken.objects.get()
    assert token not in (stored.key_hash, stored.prefix) and token.startswith(stored.prefix)
    assert post(client, token, GOOD).status_code == 201
    (use,) = queued()
    use.run()  # the worker records the use
    assert ApiToken.objects.get().last_used is not None
    ApiToken.objects.update(active=False)  # what unticking "active" in the admin does
    response = post(client, token, GOOD)
    assert response.status_code == 401
    assert "ett_api_token" in response.json()["error"]


def test_a_tokens_use_is_recorded_by_the_worker_at_most_every_five_minutes(
        client: Client, token: str, queued: Callable[[], list[QueuedTask]]) -> None:
    """Checking a token writes nothing (most of its requests are GETs): its use goes to the
    worker, once per token per five minutes, and an older use never overwrites a newer."""
    before = timezone.now()
    for _ in range(3):
        assert get(client, token, "/api/v1/rollouts").status_code == 200
    assert ApiToken.objects.get().last_used is None
    (use,) = queued()
    assert use.name == "ett.note_token_used"
    assert use.args[0] == ApiToken.objects.get().pk
    assert use.run() is True
    used = ApiToken.objects.get().last_used
    assert used is not None and before <= used <= timezone.now()
    stale = QueuedTask(use.name, [use.args[0], (used - timedelta(minutes=1)).isoformat()])
    assert stale.run() is False  # arrived late: the newer use stays
    assert ApiToken.objects.get().last_used == used
    deferred._SENT.clear()  # five minutes later, as far as this process knows
    assert get(client, token, "/metrics").status_code == 200
    (again,) = queued()
    assert again.name == "ett.note_token_used" and again.args[1] >= use.args[1]


def test_ett_api_token_prints_a_working_token_last(client: Client) -> None:
    # README's recipe: the pipeline's user owns the component it records rollouts of.
    call_command("ett_login", "pipeline", "--role", "owner", "--component", "checkpointing",
                 stdout=StringIO())
    out = StringIO()
    call_command("ett_api_token", "pipeline", "--name", "deploy", stdout=out)
    printed = out.getvalue().strip().splitlines()[-1]
    assert post(client, printed, GOOD).status_code == 201
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("ett_api_token", "nobody")


def test_openapi_document_is_served(client: Client) -> None:
    assert client.get("/api/v1/openapi.json").status_code == 302  # to the login page
    client.force_login(User.objects.create_user("docs-reader"))
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/rollouts/{rollout_id}/impact" in schema["paths"]
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    assert b"cdn." not in docs.content  # Swagger UI from our static files
