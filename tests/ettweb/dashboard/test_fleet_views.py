"""The fleet overview and the rollup-backed job page through Django's test client."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.ingest.tasks import ingest_batch
from ettweb.rollups.models import JobRollup
from tests.conftest import mark, span
from tests.ettweb.charts import traces_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_in(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="owner", password="pw-owner-1"))
    return client


def _figure(html: str, div_id: str) -> list[dict[str, Any]]:
    return traces_of(html, div_id)


def test_fleet_page_shows_trend_components_top_jobs_and_restart_tax(
        logged_in: Client, worked_example_lines: list[str], one_gpu_job_lines: list[str]) -> None:
    ingest_batch(worked_example_lines + one_gpu_job_lines)
    response = logged_in.get("/fleet/", {"group_by": "team", "interval": "day"})
    assert response.status_code == 200
    html = response.content.decode()
    # Both jobs run on 1970-01-01: (320 + 100) / (452 + 100) GPU-seconds.
    assert re.search(r'id="range-ett">76\.09%<', html)
    trend = _figure(html, "ett-trend")
    assert {trace["name"] for trace in trend} == {"ads", "(none)"}
    ads = next(trace for trace in trend if trace["name"] == "ads")
    assert ads["x"] == ["1970-01-01"] and ads["y"] == [pytest.approx(100 * 320 / 452)]
    lost = _figure(html, "lost-by-component")
    assert dict(zip(lost[0]["y"], lost[0]["x"], strict=True)) == pytest.approx(
        {"reliability": 44 / 3600, "scheduler": 28 / 3600, "pt2_compiler": 24 / 3600,
         "distributed_runtime": 16 / 3600, "checkpointing": 20 / 3600})
    tax = _figure(html, "restart-tax")  # 1080 -> 1101 x 4 GPUs
    assert {t["name"]: t["y"][0] * 3600 for t in tax} == pytest.approx(
        {"failure": 12.0, "restart_gap": 28.0, "checkpoint_load": 12.0,
         "repeated_training": 32.0})
    top = html[html.index('id="top-jobs"'):]
    assert 'href="/jobs/j1/"' in top and 'href="/jobs/j2/"' not in top  # j2 lost nothing
    assert re.search(r'id="range-failures">1<', html)
    lifecycle = html[html.index('<table id="lifecycle">'):]
    row = lifecycle[lifecycle.index("<tr><td>1970-01-01</td>"):].split("</tr>")[0]
    cells = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert (cells[0], cells[2]) == ("2", "1")  # both jobs started that day; j1 recovered once


@pytest.mark.parametrize(("params", "reason"), [
    ({"interval": "month"}, "interval: Select a valid choice"),
    ({"group_by": "user"}, "group_by: Select a valid choice"),
    ({"date_from": "2026-13-01"}, "date_from: must be a day written YYYY-MM-DD"),
    ({"date_from": "2026-03-05", "date_to": "2026-03-01"}, "date_from 2026-03-05 is after"),
    ({"date_from": "2000-01-01", "date_to": "2026-01-01"}, "range longer than"),
])
def test_bad_fleet_parameters_are_a_400_with_the_reason(logged_in: Client,
                                                        params: dict[str, str],
                                                        reason: str) -> None:
    response = logged_in.get("/fleet/", params)
    assert response.status_code == 400
    assert reason in response.content.decode()


def test_fleet_page_without_data_renders(logged_in: Client) -> None:
    response = logged_in.get("/fleet/")
    assert response.status_code == 200
    assert b"No rollups in this range." in response.content


def test_filters_show_the_range_the_page_used(logged_in: Client,
                                              worked_example_lines: list[str]) -> None:
    """With no parameters the page picks the last 30 data days: the inputs say which."""
    ingest_batch(worked_example_lines)
    html = logged_in.get("/fleet/").content.decode()
    assert 'name="date_from" value="1969-12-03"' in html  # the worked example is on 1970-01-01
    assert 'name="date_to" value="1970-01-01"' in html
    assert '<option value="day" selected>' in html


def test_fleet_page_requires_login(client: Client) -> None:
    assert client.get("/fleet/").status_code == 302


def test_job_page_headline_is_the_rollup_and_shows_anomalies(logged_in: Client) -> None:
    """Attempt 1 starts before attempt 0 ended: a valid but inconsistent timeline."""
    events = [
        mark("odd", 0, "attempt_start", 100.0, attrs={"gpus": 2}),
        span("odd", 0, "train", 100.0, 200.0, step_start=0, step_end=100),
        mark("odd", 1, "attempt_start", 150.0),
        span("odd", 1, "train", 150.0, 250.0, step_start=100, step_end=200),
        mark("odd", 1, "attempt_end", 250.0, attrs={"status": "completed"}),
    ]
    ingest_batch([json.dumps({"v": 1, "id": f"o{i}", **e}) for i, e in enumerate(events)])
    rollup = JobRollup.objects.get(job="odd")
    assert rollup.anomaly_count >= 1
    html = logged_in.get("/jobs/odd/").content.decode()
    assert re.search(r'id="job-ett">' + re.escape(f"{rollup.ett_pct:.2f}%") + "<", html)
    assert re.search(rf'id="job-anomalies">{rollup.anomaly_count}<', html)
    for kind in rollup.anomalies:
        assert kind in html
    # Headline numbers come from the rollup row: change it and the page follows.
    JobRollup.objects.filter(job="odd").update(ett_pct=12.5)
    assert 'id="job-ett">12.50%<' in logged_in.get("/jobs/odd/").content.decode()


def test_job_page_lists_the_restart_tax_per_recovery(logged_in: Client,
                                                     worked_example_lines: list[str]) -> None:
    ingest_batch(worked_example_lines)
    html = logged_in.get("/jobs/j1/").content.decode()
    table = html[html.index('id="recoveries"'):]
    assert "21.0 s" in table and "restart_gap 7.0 s" in table and "failure 3.0 s" in table


def test_jobs_list_links_to_the_fleet_overview_and_counts_anomalies(
        logged_in: Client, worked_example_lines: list[str]) -> None:
    ingest_batch(worked_example_lines)
    html = logged_in.get("/").content.decode()
    assert 'href="/fleet/"' in html
    assert "<th class=\"num\">Anomalies</th>" in html
