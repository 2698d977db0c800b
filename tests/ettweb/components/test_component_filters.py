"""Issue 14, item 1 on the component pages: every number, list and rollout narrowed by the
job filter, the filter kept in the URL and its links, bad values refused by name, the tables
as CSV (fleet of ``tests/ettweb/dashboard/scoped_fleet.py``)."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.pages.templatetags.ett_format import hours, pct
from ettweb.queries import ComponentQuery, ComponentsIndexQuery, JobFilter, calculate
from ettweb.rollouts.models import Rollout
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.dashboard.scoped_fleet import FORMULA_JOB, MARCH, MARCH_PARAMS, H
from tests.ettweb.dashboard.test_fleet_filters import figure, tile

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fleet() -> None:
    scoped_fleet.ingest()


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def _rollout(name: str, scope: dict[str, Any], component: str = "pt2_compiler") -> Rollout:
    return Rollout.objects.create(name=name, component=component, scope=scope,
                                  at=datetime(2026, 3, 3, 12, tzinfo=UTC))


def test_the_page_shows_only_the_filtered_jobs(viewer: Client) -> None:
    """pt2_compiler of the 16-GPU jobs: feed-m1-east's 2 h compile x 16 = 32 GPU-h, of the
    big jobs' 128 + 144 wall GPU-h and 32 + 32 lost."""
    html = viewer.get("/components/pt2_compiler/", {**MARCH_PARAMS, "gpus": "9-64"}) \
        .content.decode()
    assert tile(html, "component-lost-hours") == hours(32.0)
    assert tile(html, "component-lost-share") == f"{100 * 32 / (128 + 144):.2f} pts"
    assert tile(html, "component-fleet-share") == pct(100 * 32 / (32 + 32))
    top = html[html.index('id="top-jobs"'):html.index('id="top-models"')]
    assert re.findall(r'href="/jobs/([^/"]+)/"', top) == ["feed-m1-east"]
    assert figure(html, "component-lost")[0]["y"] == pytest.approx([32.0, 0.0])
    result = calculate(ComponentQuery("pt2_compiler", MARCH, jobs=JobFilter(gpus="9-64")))
    assert result is not None and result.lost_gpu_s == 32 * H


def test_the_index_shows_only_the_filtered_jobs(viewer: Client) -> None:
    html = viewer.get("/components/", {**MARCH_PARAMS, "team": "feed"}).content.decode()
    feed = calculate(ComponentsIndexQuery(MARCH, JobFilter(team="feed")))
    assert tile(html, "fleet-lost-hours") == hours(feed.fleet_lost_gpu_hours)
    assert feed.fleet_lost_gpu_hours == pytest.approx(16 * 2 + 1)  # compile, ckpt save
    assert re.search(r"pt2_compiler</a></td>\s*<td>—</td>\s*<td class=\"owners\">—</td>\s*"
                     r"<td class=\"num\">32\.00</td>", html)
    query = "date_from=2026-03-01&amp;date_to=2026-03-31&amp;team=feed"
    assert f'href="/components/pt2_compiler/?{query}"' in html


def test_the_filter_round_trips_through_the_url(viewer: Client) -> None:
    params = {**MARCH_PARAMS, "model": "m2", "team": "ads", "cluster": "west", "gpus": "9-64",
              "interval": "week"}
    html = viewer.get("/components/checkpointing/", params).content.decode()
    for name in ("model", "team", "cluster"):
        assert re.search(rf'name="{name}" value="{params[name]}" list="{name}s"', html), name
    assert '<option value="9-64" selected>' in html and '<option value="week" selected>' in html
    assert ('href="/components/?date_from=2026-03-01&amp;date_to=2026-03-31&amp;model=m2'
            '&amp;team=ads&amp;cluster=west&amp;gpus=9-64" id="index-link"') in html
    assert "of model m2 · team ads · cluster west · GPUs 9-64" in tile(html, "component-scope")
    assert tile(html, "component-lost-hours") == hours(16 * 1.5)


def test_rollouts_are_those_that_reach_the_filtered_jobs(viewer: Client) -> None:
    fleet_wide = _rollout("fleet-wide", {})
    ads = _rollout("ads only", {"teams": ["ads"]})
    feed = _rollout("feed only", {"teams": ["feed"], "models": ["m1"]})
    pattern = _rollout("by pattern", {"job_pattern": "feed-*"})
    html = viewer.get("/components/pt2_compiler/", {**MARCH_PARAMS, "team": "ads"}) \
        .content.decode()
    table = html[html.index('id="rollouts"'):]
    shown = {int(n) for n in re.findall(r'href="/rollouts/(\d+)/"', table)}
    assert shown == {fleet_wide.pk, ads.pk, pattern.pk}  # a pattern never rules one out
    assert feed.pk not in shown and tile(html, "component-rollouts") == "3"
    lanes = [t for t in figure(html, "component-lost") if t.get("meta") == "rollouts"]
    assert len(lanes) == 1 and len(lanes[0]["x"]) == 1  # three close ones, one cluster
    assert lanes[0]["customdata"] == [
        "/rollouts/?component=pt2_compiler&date_from=2026-03-03&date_to=2026-03-03&team=ads"]
    index = calculate(ComponentsIndexQuery(MARCH, JobFilter(team="feed", model="m2")))
    counts = {r.name: r.rollouts for r in index.components}
    assert counts["pt2_compiler"] == 2  # fleet-wide, pattern


def test_an_unknown_model_is_an_empty_page_that_says_so(viewer: Client) -> None:
    for path in ("/components/pt2_compiler/", "/components/"):
        response = viewer.get(path, {**MARCH_PARAMS, "model": "no-such-model"})
        assert response.status_code == 200
        assert 'id="no-jobs"' in response.content.decode()


@pytest.mark.parametrize(("path", "params", "named"), [
    ("/components/pt2_compiler/", {"gpus": "2-9"}, "gpus: Select a valid choice"),
    ("/components/", {"team": "t" * 201}, "team: Ensure this value has at most 200"),
    ("/components/pt2_compiler/", {"format": "csv", "table": "lost"},
     "table: must be one of top_jobs, top_models, rollouts, not 'lost'"),
    ("/components/", {"format": "csv", "table": "top_jobs"},
     "table: must be one of components, not 'top_jobs'"),
    ("/components/", {"format": "pdf"}, "format: Select a valid choice"),
])
def test_bad_values_are_a_400_naming_the_parameter(viewer: Client, path: str,
                                                   params: dict[str, str], named: str) -> None:
    response = viewer.get(path, params)
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}")


def _csv(client: Client, path: str, **params: str) -> list[list[str]]:
    response = client.get(path, {**MARCH_PARAMS, "format": "csv", **params})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_every_table_exports_its_filtered_rows_neutralized(viewer: Client) -> None:
    Rollout.objects.create(name="=cmd()", component="pt2_compiler", scope={"teams": ["ads"]},
                           at=datetime(2026, 3, 3, 12, tzinfo=UTC))
    top = _csv(viewer, "/components/pt2_compiler/", table="top_jobs", team="ads")
    assert [row[0] for row in top[1:]] == ["ads-m1-east", "'" + FORMULA_JOB]
    assert [float(row[1]) for row in top[1:]] == pytest.approx([2.0, 0.5])
    models = _csv(viewer, "/components/pt2_compiler/", table="top_models", team="ads")
    assert [(row[0], float(row[1]), row[2]) for row in models[1:]] == [("m1", 2.5, "2")]
    rollouts = _csv(viewer, "/components/pt2_compiler/", table="rollouts", team="ads")
    assert rollouts[0][:4] == ["id", "rollout", "at", "scope"]
    assert [row[1] for row in rollouts[1:]] == ["'=cmd()"]
    index = _csv(viewer, "/components/", table="components", cluster="west")
    assert index[0][:3] == ["component", "owner_team", "lost_gpu_hours"]
    lost = {row[0]: float(row[2]) for row in index[1:]}
    assert lost["checkpointing"] == pytest.approx(16 * 1.5 + 1)
    assert lost["pt2_compiler"] == 0.0
    html = viewer.get("/components/pt2_compiler/", {**MARCH_PARAMS, "team": "ads"}) \
        .content.decode()
    link = re.search(r'href="\?([^"]+)" id="top-jobs-csv"', html)
    assert link is not None and "team=ads" in link.group(1) and "table=top_jobs" in link.group(1)
