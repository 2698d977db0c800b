"""Dashboard pages through Django's test client on real Postgres."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client
from django.test.utils import override_settings

from collector.schema import parse_event
from ettweb.attribution.engine import attribute
from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.charts import traces_of

pytestmark = pytest.mark.django_db

#: ETT_SPEC §3 worked example.
WORKED_EXAMPLE_ETT = "70.80%"


@pytest.fixture
def user() -> User:
    return User.objects.create_user(username="owner", password="pw-owner-1")


@pytest.fixture
def logged_in(client: Client, user: User) -> Client:
    client.force_login(user)
    return client


@pytest.mark.parametrize("url", ["/", "/jobs/j1/"])
def test_pages_require_login(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


def test_login_page_renders(client: Client) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


def test_jobs_list_shows_job_and_gpu_weighted_fleet_ett(
        logged_in: Client, worked_example_lines: list[str], one_gpu_job_lines: list[str]) -> None:
    ingest_batch(worked_example_lines + one_gpu_job_lines)
    fleet = attribute(parse_event(line) for line in worked_example_lines + one_gpu_job_lines)
    html = logged_in.get("/").content.decode()
    fleet_tile = re.search(r'id="fleet-ett">([^<]+)<', html)
    assert fleet_tile is not None
    # (320 + 100) / (452 + 100) GPU-seconds, not the mean of 70.80% and 100%.
    assert fleet_tile.group(1) == f"{fleet.ett_pct:.2f}%" == "76.09%"
    assert "85.40%" not in html
    table = html[html.index('id="jobs-table"'):]
    assert WORKED_EXAMPLE_ETT in table and "100.00%" in table
    assert 'href="/jobs/j1/"' in html and 'href="/jobs/j2/"' in html
    assert 'id="fleet-lost"' in html  # stacked lost-time chart


def test_job_page_headline_numbers_and_charts(logged_in: Client,
                                              worked_example_lines: list[str]) -> None:
    ingest_batch(worked_example_lines)
    ingest_batch(['{"v": 1, "job": "j1"}', '{"v": 1, "job": "other"}'])
    response = logged_in.get("/jobs/j1/")
    html = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'id="job-ett">70\.80%<', html)
    assert "1m 53s" in html  # wall 113 s
    assert "10.0 s" in html  # time to start
    assert "21.0 s" in html  # time to recover
    assert 'id="phase-timeline"' in html and 'id="lost-by-component"' in html
    assert "1 rejected line" in html  # only the line naming j1
    assert "model dlrm · team ads</p>" in html
    figure = _figure(html, "phase-timeline")
    rows = {y for trace in figure["data"] for y in trace["y"]}
    assert rows == {"attempt 0", "attempt 1"}
    names = {trace["name"] for trace in figure["data"]}
    assert {"productive", "restart_gap", "failure", "compile"} <= names


def _figure(html: str, div_id: str) -> dict[str, list[dict[str, Any]]]:
    """The figure JSON the page embeds for ``div_id`` (static/ett/ett.js draws it)."""
    return {"data": traces_of(html, div_id)}


def test_unknown_job_is_404(logged_in: Client) -> None:
    assert logged_in.get("/jobs/nope/").status_code == 404


def test_job_ids_with_slashes_are_reachable(logged_in: Client) -> None:
    ingest_batch([json.dumps({"v": 1, "id": "x1", "job": "team/exp 1", "attempt": 0,
                              "kind": "mark", "mark": "heartbeat", "ts": 5.0})])
    assert logged_in.get("/jobs/team/exp%201/").status_code == 200


def test_healthz_reports_database_and_broker(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_is_503_when_broker_is_down(client: Client, tmp_path: Path) -> None:
    with override_settings(CELERY_BROKER_URL=f"redis+socket://{tmp_path}/absent.sock"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok" and body["broker"].startswith("error:")


def test_plotly_js_is_served_locally(logged_in: Client, worked_example_lines: list[str]) -> None:
    found = finders.find("vendor/plotly.min.js")
    assert isinstance(found, str) and Path(found).stat().st_size > 1_000_000
    ingest_batch(worked_example_lines)
    html = logged_in.get("/jobs/j1/").content.decode()
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', html)
    assert scripts == ["/static/vendor/plotly.min.js", "/static/ett/ett.js"]
    assert "cdn." not in html
    served = logged_in.get("/static/vendor/plotly.min.js")
    assert served.status_code == 200
    assert b"plotly" in b"".join(served.streaming_content)[:2000].lower()  # type: ignore[attr-defined]


def test_timeline_merges_touching_pieces(logged_in: Client, event_line: Any) -> None:
    """Ten one-minute train slices draw as one bar, not ten."""
    lines = [event_line(kind="mark", mark="attempt_start", ts=0.0, attrs={"gpus": 2})]
    lines += [event_line(kind="span", phase="train", start=60.0 * i, end=60.0 * (i + 1),
                         step_start=10 * i, step_end=10 * (i + 1)) for i in range(10)]
    ingest_batch(lines)
    figure = _figure(logged_in.get("/jobs/j1/").content.decode(), "phase-timeline")
    productive = [trace for trace in figure["data"] if trace["name"] == "productive"]
    assert len(productive) == 1
    assert productive[0]["x"] == [10.0] and productive[0]["base"] == [0.0]  # minutes


def test_timeline_draws_repeated_steps_before_new_ones(logged_in: Client,
                                                       worked_example_lines: list[str]) -> None:
    """Attempt 1 re-trains steps 600-680 (1093-1101) before new steps (1101-1113)."""
    ingest_batch(worked_example_lines)
    figure = _figure(logged_in.get("/jobs/j1/").content.decode(), "phase-timeline")
    by_name = {trace["name"]: trace for trace in figure["data"]}
    repeated = by_name["repeated_training"]
    assert repeated["y"] == ["attempt 1"]
    assert repeated["base"] == [pytest.approx(93.0)] and repeated["x"] == [pytest.approx(8.0)]
    productive = by_name["productive"]
    last_new = max(zip(productive["base"], productive["x"], strict=True))
    assert last_new == (pytest.approx(101.0), pytest.approx(12.0))


@pytest.mark.parametrize("url", ["/", "/fleet/", "/jobs/j1/"])
def test_page_titles_are_plain_text_and_sections_appear_once(
        logged_in: Client, worked_example_lines: list[str], url: str) -> None:
    ingest_batch(worked_example_lines)
    html = logged_in.get(url).content.decode()
    title = re.search(r"<title>(.*?)</title>", html, re.S)
    assert title is not None and "<" not in title.group(1), title
    head = html.split("<body", 1)[0]
    assert "<section" not in head and "<table" not in head
    assert html.count('id="recoveries"') == (1 if url == "/jobs/j1/" else 0)


def test_favicon_ico_redirects_to_the_static_icon(client: Client) -> None:
    """The admin's pages name no icon, so browsers ask for /favicon.ico: no 404 in the log."""
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")
