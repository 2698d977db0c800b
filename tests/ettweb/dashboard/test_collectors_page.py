"""``/collectors/`` and ``/api/v1/collectors``: each agent's latest health with the silent ones
flagged, and the lines ingestion refused with their reasons — from one query, so the page and
the API agree; bad parameters are a 400 naming them; source names and raw lines are escaped."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from ettweb.access.tokens import issue_token
from ettweb.ingest.models import CollectorHealth, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import CollectorsQuery, calculate

pytestmark = pytest.mark.django_db
HOSTILE = '<script>alert("x")</script>'


def _health(source: str, *, minutes_ago: float, **counts: int) -> None:
    CollectorHealth.objects.create(source=source, **counts)
    CollectorHealth.objects.filter(source=source).update(
        updated_at=timezone.now() - timedelta(minutes=minutes_ago))


@pytest.fixture
def fleet() -> None:
    _health("node-live", minutes_ago=0.5, backlog_events=7, shipped_events=900,
            dropped_events=3, corrupted_records=1, spool_files=2)
    _health("node-dead", minutes_ago=42, backlog_events=50, shipped_events=100)
    _health(HOSTILE, minutes_ago=1)
    ingest_batch([json.dumps({"v": 1, "id": "x", "job": "j", "kind": "nonsense"}),
                  "not json at all " + HOSTILE], "node-live", None)


@pytest.fixture
def logged_in(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def test_silent_collectors_come_first_and_are_flagged(fleet: None) -> None:
    result = calculate(CollectorsQuery(silent_after_s=300))
    assert [row.source for row in result.collectors] == ["node-dead", HOSTILE, "node-live"]
    assert [row.silent for row in result.collectors] == [True, False, False]
    assert result.collectors[0].silent_for_s == pytest.approx(42 * 60, abs=30)
    assert (result.silent, result.backlog_events, result.dropped_events,
            result.corrupted_records) == (1, 57, 3, 1)
    # A longer threshold: nobody is silent.
    assert calculate(CollectorsQuery(silent_after_s=3600)).silent == 0


def test_rejected_lines_are_counted_per_reason_and_per_source(fleet: None) -> None:
    result = calculate(CollectorsQuery())
    lines = sum(row.lines for row in QuarantinedEvent.objects.all())
    assert result.rejected_lines == lines == sum(r.lines for r in result.reasons)
    assert {r.reason for r in result.reasons} == {
        "bad JSON: Expecting value: line 1 column 1 (char 0)",
        "missing required field 'attempt'"}
    live = next(row for row in result.collectors if row.source == "node-live")
    assert live.rejected_lines == lines
    assert calculate(CollectorsQuery(source="node-dead")).rejected == ()


def test_the_page_shows_and_escapes_them(logged_in: Client, fleet: None) -> None:
    page = logged_in.get("/collectors/")
    assert page.status_code == 200
    html = page.content.decode()
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert 'id="collectors-silent">1<' in html
    assert html.count('class="silent"') == 1
    assert "missing required field &#x27;attempt&#x27;" in html
    assert 'class="active">Collectors<' in html  # the top bar says where we are
    one = logged_in.get("/collectors/?source=node-dead&silent_after=60").content.decode()
    assert 'id="collectors-count">1<' in one and 'id="collectors-silent">0<' in one
    assert 'id="no-rejected"' in one


def test_an_empty_install_explains_what_to_start(logged_in: Client) -> None:
    html = logged_in.get("/collectors/").content.decode()
    assert 'id="no-collectors"' in html and "python -m collector" in html


@pytest.mark.parametrize(("query", "named"), [
    ("silent_after=abc", "silent_after"), ("silent_after=0", "silent_after"),
    ("silent_after=99999999", "silent_after"), ("source=" + "x" * 300, "source")])
def test_bad_parameters_are_a_400_naming_them(logged_in: Client, query: str, named: str) -> None:
    response = logged_in.get(f"/collectors/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}:")


def _api(client: Client, path: str) -> tuple[int, dict[str, Any]]:
    token = issue_token(User.objects.create_user(f"reader-{len(path)}"), "collectors test")
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


def test_the_api_answers_what_the_page_shows(client: Client, fleet: None) -> None:
    status, body = _api(client, "/api/v1/collectors?silent_after_s=300&rejected=5")
    assert status == 200
    expected = calculate(CollectorsQuery(silent_after_s=300, rejected=5)).as_api()
    for row in (*body["collectors"], *expected["collectors"]):
        assert row.pop("silent_for_s") >= 0  # the clock moved on between the two reads
    assert expected == body
    assert body["collectors"][0]["source"] == "node-dead"
    assert body["silent"] == 1 and len(body["rejected"]) <= 5
    assert client.get("/api/v1/collectors").status_code == 401


@pytest.mark.parametrize(("query", "named"), [
    ("silent_after_s=5", "silent_after_s"), ("rejected=0", "rejected"),
    ("rejected=many", "rejected")])
def test_the_api_refuses_bad_parameters_by_name(client: Client, query: str, named: str) -> None:
    status, body = _api(client, f"/api/v1/collectors?{query}")
    assert status == 400 and body["error"].startswith(f"{named}:")


# --------------------------------------------------------------------------- CSV exports

FORMULA = "=HYPERLINK(\"http://evil.example\",\"x\")"


def _csv(client: Client, query: str) -> list[list[str]]:
    response = client.get(f"/collectors/?format=csv&{query}")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment; filename=")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_the_collectors_table_exports_as_csv_silent_first(logged_in: Client, fleet: None) -> None:
    _health(FORMULA, minutes_ago=2, dropped_events=9)
    rows = _csv(logged_in, "table=collectors&silent_after=5")
    header, *body = rows
    assert header[:3] == ["source", "collector_id", "status"]
    column = dict(zip(header, zip(*body, strict=True), strict=True))
    assert column["source"] == ("node-dead", "'" + FORMULA, HOSTILE, "node-live")
    assert column["status"] == ("silent", "reporting", "reporting", "reporting")
    assert column["dropped_events"] == ("0", "9", "0", "3")
    assert column["backlog_events"][0] == "50"
    # The page's threshold and source apply: nobody is silent after an hour, one source left.
    one = _csv(logged_in, "table=collectors&silent_after=60&source=node-dead")
    assert [row[:3] for row in one[1:]] == [["node-dead", "", "reporting"]]


def test_rejected_lines_and_reasons_export_with_formulas_neutralized(
        logged_in: Client, fleet: None) -> None:
    ingest_batch(["=cmd|' /C calc'!A0", "@SUM(1+1)"], "node-dead", None)
    header, *body = _csv(logged_in, "table=rejected")
    assert header == ["received_at", "source", "job", "reason", "lines", "line_start",
                      "line_bytes"]
    assert len(body) == QuarantinedEvent.objects.count() == 4
    starts = [row[5] for row in body]
    assert starts[:2] == ["'@SUM(1+1)", "'=cmd|' /C calc'!A0"]  # newest first
    assert not any(cell.startswith(("=", "+", "-", "@")) for row in body for cell in row)
    reasons = _csv(logged_in, "table=reasons")
    assert reasons[0] == ["reason", "lines"]
    assert sum(int(lines) for _, lines in reasons[1:]) == 4
    only_dead = _csv(logged_in, "table=rejected&source=node-dead")
    assert {row[1] for row in only_dead[1:]} == {"node-dead"} and len(only_dead) == 3


def test_the_page_links_each_table_to_its_csv(logged_in: Client, fleet: None) -> None:
    html = logged_in.get("/collectors/?silent_after=7&source=node-live").content.decode()
    for table in ("collectors", "reasons", "rejected"):
        assert (f'id="{table}-csv"' in html and
                f"?silent_after=7&amp;source=node-live&amp;format=csv&amp;table={table}" in html)


@pytest.mark.parametrize(("query", "named"), [
    ("format=csv&table=nope", "table"), ("format=csv", "table"),
    ("format=xml&table=collectors", "format")])
def test_a_bad_export_is_a_400_naming_the_parameter(logged_in: Client, query: str,
                                                    named: str) -> None:
    response = logged_in.get(f"/collectors/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}:")


def test_the_csv_needs_a_login(client: Client, fleet: None) -> None:
    response = client.get("/collectors/?format=csv&table=rejected")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
