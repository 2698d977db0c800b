"""The API says which running jobs are stale (issue 41, part 4): ``GET /api/v1/jobs`` flags
each job, counts them and filters by ``status=stale``; ``GET /api/v1/jobs/{job}`` flags the
job and its running attempt. Judged by the clock against ``ETT_STALE_AFTER_S``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token
from tests.ettweb.stale_fleet import store_stale_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def token() -> str:
    return issue_token(User.objects.create_user("reader"), "stale api test")


def get(client: Client, token: str, path: str) -> tuple[int, dict[str, Any]]:
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


def test_the_jobs_list_flags_counts_and_filters_stale_jobs(client: Client, token: str) -> None:
    gone_heard = store_stale_fleet()
    status, body = get(client, token, "/api/v1/jobs?sort=job")
    assert status == 200, body
    assert (body["stale_jobs"], body["stale_after_s"]) == (1, 120.0)
    rows = {row["job"]: row for row in body["jobs"]}
    assert {job: (row["status"], row["stale"]) for job, row in rows.items()} == {
        "done": ("completed", False), "gone": ("running", True), "live": ("running", False)}
    assert datetime.fromisoformat(rows["gone"]["last_heard"]).timestamp() == \
        pytest.approx(gone_heard)
    status, body = get(client, token, "/api/v1/jobs?status=stale")
    assert status == 200 and [row["job"] for row in body["jobs"]] == ["gone"]
    assert body["total"] == body["stale_jobs"] == 1 and body["filter"]["status"] == "stale"
    _, running = get(client, token, "/api/v1/jobs?status=running&sort=job")
    assert [row["job"] for row in running["jobs"]] == ["gone", "live"]


def test_a_status_it_does_not_know_is_a_400_naming_stale(client: Client, token: str) -> None:
    status, body = get(client, token, "/api/v1/jobs?status=stalled")
    assert status == 400 and body["error"].startswith("status:") and "stale" in body["error"]


def test_the_job_flags_itself_and_its_running_attempt(client: Client, token: str) -> None:
    store_stale_fleet()
    status, gone = get(client, token, "/api/v1/jobs/gone")
    assert status == 200, gone
    assert gone["stale"] is True and gone["status"] == "ready"
    assert [(a["status"], a["stale"]) for a in gone["attempts"]] == [("running", True)]
    _, live = get(client, token, "/api/v1/jobs/live")
    assert live["stale"] is False and live["attempts"][0]["stale"] is False
    assert live["last_heard"] > gone["last_heard"]
