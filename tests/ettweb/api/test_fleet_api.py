"""``/api/v1/fleet/…`` and ``/api/v1/components…`` (issue 14, item 6): the JSON behind the
fleet and component pages' charts and tables, with the pages' filters, equal to what the
pages show; every bad parameter a 400 naming it, an unknown component a 404, never a 500."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ettweb.access.tokens import issue_token
from ettweb.pages.templatetags.ett_format import hours, pct
from ettweb.queries import JobFilter, LifecycleQuery, TrendQuery, calculate
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.dashboard.scoped_fleet import MARCH, MARCH_PARAMS, H
from tests.ettweb.dashboard.test_fleet_filters import figure, tile
from tests.examples import examples

pytestmark = pytest.mark.django_db
ADS = {**MARCH_PARAMS, "team": "ads"}


@pytest.fixture(autouse=True)
def fleet() -> None:
    scoped_fleet.ingest()


@pytest.fixture
def auth() -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {issue_token(User.objects.create_user('r'), 'api')}"}


@pytest.fixture
def viewer() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer"))
    return client


def get(client: Client, auth: dict[str, str], path: str, **params: str) -> Any:
    response = client.get(path, params, **auth)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def page(viewer: Client, path: str, **params: str) -> str:
    response = viewer.get(path, params)
    assert response.status_code == 200
    return str(response.content.decode())


def test_the_trend_is_the_pages_trend(client: Client, auth: dict[str, str],
                                      viewer: Client) -> None:
    body = get(client, auth, "/api/v1/fleet/trend", **ADS, group_by="cluster")
    html = page(viewer, "/fleet/", **ADS, group_by="cluster")
    assert pct(body["ett_pct"]) == tile(html, "range-ett")
    assert body["ett_pct"] == pytest.approx(100 * 123.5 / 158)
    drawn = {t["name"]: t["y"] for t in figure(html, "ett-trend")}
    assert body["groups"] == ["east", "west"] == sorted(drawn)
    for group in body["groups"]:
        assert [p["ett_pct"] for p in body["points"] if p["group"] == group] == [
            y for y in drawn[group] if y is not None]  # the chart breaks its line at gaps
    assert body["filter"] == {"model": "", "team": "ads", "cluster": "", "gpus": ""}
    assert (body["date_from"], body["date_to"], body["previous"]) == ("2026-03-01",
                                                                      "2026-03-31", None)


def test_the_trend_with_the_previous_period(client: Client, auth: dict[str, str],
                                            viewer: Client) -> None:
    days = {"date_from": "2026-03-04", "date_to": "2026-03-05", "compare": "previous"}
    body = get(client, auth, "/api/v1/fleet/trend", **days)
    html = page(viewer, "/fleet/", **days)
    previous = body["previous"]
    assert (previous["date_from"], previous["date_to"]) == ("2026-03-02", "2026-03-03")
    [dashed] = [t for t in figure(html, "ett-trend") if t.get("meta") == "previous"]
    assert [p["ett_pct"] for p in previous["points"]] == dashed["y"]
    assert [p["period"] for p in previous["points"]] == dashed["customdata"]
    assert body["net_change_pts"] == pytest.approx(100 * 1.5 / 2 - 100 * 5 / 6)


def test_lost_time_lifecycle_and_top_jobs_are_the_pages(client: Client, auth: dict[str, str],
                                                        viewer: Client) -> None:
    html = page(viewer, "/fleet/", **ADS)
    lost = get(client, auth, "/api/v1/fleet/lost-by-component", **ADS)
    drawn = figure(html, "lost-by-component")[0]
    assert [c["component"] for c in lost["components"]] == drawn["y"]
    assert [c["gpu_s"] / H for c in lost["components"]] == pytest.approx(drawn["x"])
    assert hours(lost["lost_gpu_s"] / H) == tile(html, "range-lost")
    over_time = get(client, auth, "/api/v1/fleet/lost-trend", **ADS)
    stacked = {t["name"]: t["y"] for t in figure(html, "lost-over-time")}
    assert set(over_time["gpu_s"]) == set(stacked)
    for component, values in over_time["gpu_s"].items():
        assert [v / H for v in values] == pytest.approx(stacked[component])
    lifecycle = get(client, auth, "/api/v1/fleet/lifecycle", **ADS)
    assert str(lifecycle["failures"]) == tile(html, "range-failures") == "1"
    assert lifecycle == {**lifecycle, **calculate(LifecycleQuery(
        MARCH, jobs=JobFilter(team="ads"))).as_api()}
    top = get(client, auth, "/api/v1/fleet/top-jobs", **ADS, limit="2")
    table = html[html.index('id="top-jobs"'):html.index('id="lifecycle"')]
    assert [j["job"] for j in top["jobs"]] == re.findall(r'href="/jobs/([^/"]+)/"', table)[:2]


def test_the_headline_is_the_pages_tiles(client: Client, auth: dict[str, str],
                                         viewer: Client) -> None:
    html = page(viewer, "/fleet/", **ADS)
    body = get(client, auth, "/api/v1/fleet/headline", **ADS)
    assert pct(body["week_ett_pct"]) == tile(html, "week-ett")
    assert hours(body["gpus_lost"]) == tile(html, "gpus-lost")
    assert f"{body['failures_per_1k_gpu_hours']:.2f}" == tile(html, "failures-per-1k")
    assert body["failures"] == 1 and body["week_from"] == "2026-03-25"
    # GPUs' worth lost is the range's lost GPU-hours over its hours, as the tile says.
    lost = get(client, auth, "/api/v1/fleet/lost-by-component", **ADS)
    assert body["gpus_lost"] == pytest.approx(lost["lost_gpu_s"] / H / (31 * 24))
    everyone = get(client, auth, "/api/v1/fleet/headline", **MARCH_PARAMS)
    assert everyone["lost_gpu_hours"] > body["lost_gpu_hours"]


def test_components_are_the_components_pages(client: Client, auth: dict[str, str],
                                             viewer: Client) -> None:
    feed = {**MARCH_PARAMS, "team": "feed"}
    body = get(client, auth, "/api/v1/components", **feed)
    html = page(viewer, "/components/", **feed)
    assert hours(body["fleet_lost_gpu_s"] / H) == tile(html, "fleet-lost-hours")
    rows = {r["name"]: r for r in body["components"]}
    assert rows["pt2_compiler"]["lost_gpu_s"] == 32 * H
    one = get(client, auth, "/api/v1/components/checkpointing", **feed, interval="week")
    detail = page(viewer, "/components/checkpointing/", **feed, interval="week")
    assert hours(one["lost_gpu_s"] / H) == tile(detail, "component-lost-hours") == "1.00"
    assert [p["lost_gpu_s"] / H for p in one["points"]] == pytest.approx(
        figure(detail, "component-lost")[0]["y"])
    assert [j["job"] for j in one["top_jobs"]] == ["feed-m2-west"]
    assert one["name"] == "checkpointing" and one["interval"] == "week"


def test_a_browser_session_reads_it_too(viewer: Client) -> None:
    response = viewer.get("/api/v1/fleet/trend", ADS)
    assert response.status_code == 200
    assert response.json()["ett_pct"] == pytest.approx(
        calculate(TrendQuery(MARCH, jobs=JobFilter(team="ads"))).ett_pct)


@pytest.mark.parametrize("path", ["/api/v1/fleet/trend", "/api/v1/fleet/lifecycle",
                                  "/api/v1/components", "/api/v1/components/checkpointing"])
def test_no_token_no_numbers(client: Client, path: str) -> None:
    assert client.get(path).status_code == 401
    assert client.get(path, HTTP_AUTHORIZATION="Bearer ett_wrong").status_code == 401


@pytest.mark.parametrize(("path", "error"), [
    ("/api/v1/fleet/trend?gpus=7", "gpus: gpus must be one of 1, 2-8, 9-64, 65-512, 513+"),
    ("/api/v1/fleet/trend?team=" + "t" * 201, "team: String should have at most 200"),
    ("/api/v1/fleet/trend?interval=month", "interval: Input should be 'day' or 'week'"),
    ("/api/v1/fleet/trend?group_by=user", "group_by: Input should be"),
    ("/api/v1/fleet/trend?compare=yes", "compare: Input should be"),
    ("/api/v1/fleet/lost-by-component?date_from=March", "date_from: Input should be a valid"),
    ("/api/v1/fleet/lost-trend?date_from=2026-03-05&date_to=2026-03-01",
     "date_from: date_from 2026-03-05 is after date_to 2026-03-01"),
    ("/api/v1/fleet/lifecycle?date_to=9999-12-31", "date_to: date_to 9999-12-31 is outside"),
    ("/api/v1/fleet/lifecycle?date_from=2000-01-01&date_to=2026-01-01",
     "date_from/date_to: range longer than"),
    ("/api/v1/fleet/top-jobs?limit=0", "limit: must be between 1 and 1000, not 0"),
    ("/api/v1/components/checkpointing?interval=hour", "interval: Input should be"),
])
def test_bad_parameters_are_400s_that_name_them(client: Client, auth: dict[str, str],
                                                path: str, error: str) -> None:
    response = client.get(path, **auth)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"].startswith(error)


def test_a_nul_is_refused_before_any_query(client: Client, auth: dict[str, str]) -> None:
    response = client.get("/api/v1/components?cluster=%00", **auth)
    assert response.status_code == 400
    assert "NUL character in query parameter 'cluster'" in response.content.decode()


@pytest.mark.parametrize("name", ["no_such_component", "a/b", "<script>", "x y"])
def test_an_unknown_component_is_a_404(client: Client, auth: dict[str, str], name: str) -> None:
    response = client.get("/api/v1/components/" + quote(name, safe=""), **auth)
    assert response.status_code == 404
    assert response.json() == {"error": f"no component {name!r}"}


def test_an_unknown_label_is_an_empty_answer(client: Client, auth: dict[str, str]) -> None:
    body = get(client, auth, "/api/v1/fleet/trend", model="no-such-model")
    assert (body["points"], body["wall_gpu_s"]) == ([], 0.0)


def test_the_openapi_document_lists_every_endpoint(viewer: Client) -> None:
    paths = viewer.get("/api/v1/openapi.json").json()["paths"]
    for path in ("/api/v1/fleet/trend", "/api/v1/fleet/lost-by-component",
                 "/api/v1/fleet/lost-trend", "/api/v1/fleet/lifecycle", "/api/v1/fleet/top-jobs",
                 "/api/v1/components", "/api/v1/components/{name}"):
        assert "get" in paths[path], path
    names = {p["name"] for p in paths["/api/v1/fleet/trend"]["get"]["parameters"]}
    assert {"date_from", "date_to", "model", "team", "cluster", "gpus", "interval", "group_by",
            "compare"} <= names


FUZZ = settings(max_examples=examples(300), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@FUZZ
@given(path=st.sampled_from(["/api/v1/fleet/trend", "/api/v1/fleet/lost-by-component",
                             "/api/v1/fleet/lost-trend", "/api/v1/fleet/lifecycle",
                             "/api/v1/fleet/top-jobs", "/api/v1/components",
                             "/api/v1/components/checkpointing"]),
       name=st.sampled_from(["date_from", "date_to", "model", "team", "cluster", "gpus",
                             "interval", "group_by", "compare", "limit"]),
       value=st.one_of(st.text(max_size=30), st.integers(-(2**70), 2**70),
                       st.sampled_from(["0001-01-01", "9999-12-31", "1899-12-31", "x" * 300,
                                        "513+", "2-8", "previous"])))
def test_no_parameter_is_a_500(client: Client, auth: dict[str, str], path: str, name: str,
                               value: Any) -> None:
    response = client.get(f"{path}?{urlencode({name: str(value)})}", **auth)
    assert response.status_code in (200, 400), (path, name, value, response.content[:300])
    if response.status_code == 400:  # JSON naming the parameter (a NUL: the middleware's text)
        reason = (response.json()["error"] if response["Content-Type"] == "application/json"
                  else response.content.decode())
        assert name in reason or "range longer" in reason, reason
