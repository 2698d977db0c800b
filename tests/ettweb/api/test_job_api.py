"""``GET /api/v1/jobs/{job}``: the job page's numbers as JSON, from the same query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token
from ettweb.attribution.engine import attribute_job
from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.refresh import load_events, refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.rank_events import ranked_job
from tests.ettweb.queued import QueuedTask

pytestmark = pytest.mark.django_db


@pytest.fixture
def token() -> str:
    return issue_token(User.objects.create_user("reader"), "job api test")


def store(timeline: Timeline) -> None:
    refresh_jobs(ingest_lines(timeline.lines()).jobs)


def get(client: Client, token: str, path: str) -> tuple[int, dict[str, Any]]:
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


def test_the_job_answers_the_engines_numbers(client: Client, token: str) -> None:
    store(worked_example())
    status, body = get(client, token, "/api/v1/jobs/j1")
    assert status == 200, body
    assert body["status"] == "ready"
    engine = attribute_job(load_events(["j1"])["j1"])
    assert body["ett_pct"] == pytest.approx(engine.ett_pct) == pytest.approx(70.796, abs=1e-3)
    assert (body["wall_s"], body["productive_s"], body["wall_gpu_s"]) == (113.0, 80.0, 452.0)
    assert body["lost_s"] == pytest.approx(engine.lost_s)
    assert body["lost_by_component_s"] == pytest.approx(
        {"checkpointing": 5.0, "distributed_runtime": 4.0, "pt2_compiler": 6.0,
         "reliability": 11.0, "scheduler": 7.0})
    assert [(a["attempt"], a["status"], a["repeated_steps"]) for a in body["attempts"]] == [
        (0, "failed", 0), (1, "completed", 80)]
    assert sum(a["repeated_steps"] for a in body["attempts"]) == body["repeated_steps"] == 80
    (recovery,) = body["recoveries"]
    assert (recovery["attempt"], recovery["start"], recovery["end"], recovery["seconds"]) == (
        0, 1080.0, 1101.0, 21.0)
    assert recovery["by_category"] == pytest.approx(
        {"failure": 3.0, "restart_gap": 7.0, "checkpoint_load": 3.0, "repeated_training": 8.0})
    assert body["timeline"][1]["pieces"][0] == ["restart_gap", 1083.0, 1090.0]
    assert [(lane["attempt"], lane["ranks"], lane["rank_count"]) for lane in body["lanes"]] == [
        (0, "0", 1), (1, "0", 1)]
    assert body["lanes"][1]["runs"] == [["checkpoint_load", 1090.0, 1093.0],
                                        ["train", 1093.0, 1113.0]]


def test_lanes_name_their_rank_sets(client: Client, token: str) -> None:
    store(ranked_job(40, job="ranks", slow={10, 11}))
    status, body = get(client, token, "/api/v1/jobs/ranks")
    assert status == 200
    attempt0 = [(lane["ranks"], lane["rank_count"]) for lane in body["lanes"]
                if lane["attempt"] == 0]
    assert attempt0 == [("0-9, 12-39", 38), ("10-11", 2)]


@pytest.mark.parametrize("path", ["team/exp 1", "team/exp%201", "team%2Fexp%201"])
def test_job_ids_with_slashes_are_reachable(client: Client, token: str, path: str) -> None:
    t = worked_example()
    for event in t.events:
        event["job"] = "team/exp 1"
    store(t)
    status, body = get(client, token, "/api/v1/jobs/" + path.replace(" ", "%20"))
    assert status == 200, body
    assert body["job"] == "team/exp 1"


def test_an_unknown_job_is_a_404_with_a_json_error(client: Client, token: str) -> None:
    status, body = get(client, token, "/api/v1/jobs/" + quote("no/such job"))
    assert status == 404
    assert body == {"error": "job: no events for job 'no/such job'"}


def test_a_job_being_computed_is_a_202_to_ask_again(
        client: Client, token: str, queued: Callable[[], list[QueuedTask]]) -> None:
    """Events stored, no rollup yet: a 202 saying so with what is known and when to ask
    again; the GET asked the worker, whose refresh turns the next answer into the 200."""
    ingest_lines(worked_example().lines())
    response = client.get("/api/v1/jobs/j1", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 202
    assert response["Retry-After"] == "5"
    assert response.json() == {"job": "j1", "status": "computing", "model": "",
                               "team": "", "cluster": "", "events": 12,
                               "last_event_time": 1113.0, "retry_after_s": 5,
                               "refresh_parked": None}
    tasks = queued()
    assert QueuedTask("ett.refresh_outdated_rollups", [["j1"]]) in tasks
    for task in tasks:
        task.run()
    status, body = get(client, token, "/api/v1/jobs/j1")
    assert (status, body["status"], body["wall_s"]) == (200, "ready", 113.0)


def test_the_job_needs_a_token_or_a_session(client: Client) -> None:
    store(worked_example())
    assert client.get("/api/v1/jobs/j1").status_code == 401
    client.force_login(User.objects.create_user("browser"))
    assert client.get("/api/v1/jobs/j1").status_code == 200


def test_a_hostile_job_name_comes_back_as_data(client: Client, token: str) -> None:
    name = "<script>alert(1)</script>"
    t = worked_example()
    for event in t.events:
        event["job"] = name
    store(t)
    response = client.get("/api/v1/jobs/" + quote(name), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")  # data, never HTML
    assert response.json()["job"] == name


def test_the_openapi_document_lists_the_endpoint(client: Client) -> None:
    client.force_login(User.objects.create_user("docs"))
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    answers = paths["/api/v1/jobs/{job}"]["get"]["responses"]
    assert {"200", "202", "404"} <= set(answers)
