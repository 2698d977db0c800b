"""Issue 14, items 1 and 2: the fleet overview filtered by model, team, cluster and GPU-size
bucket, kept in the URL, the previous period overlaid on request, and its tables as CSV.

"Exactly the filtered subset's numbers" is checked against the truth: every query run with
the filter over the whole fleet must answer what the same query answers, unfiltered, once
every other job's rollups are deleted (``scoped_fleet.keep_only``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.ingest.tasks import ingest_batch
from ettweb.pages import trend_figures
from ettweb.pages.templatetags.ett_format import hours, pct
from ettweb.queries import (
    ComponentQuery,
    ComponentsIndexQuery,
    DateRange,
    JobFilter,
    JobsQuery,
    LifecycleQuery,
    LostByComponentQuery,
    LostTrendQuery,
    TopJobsQuery,
    TrendQuery,
    calculate,
)
from tests.conftest import mark
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.dashboard.scoped_fleet import FORMULA_JOB, MARCH, MARCH_PARAMS, H

pytestmark = pytest.mark.django_db

#: Filters that each keep a different, strict, non-empty part of the fleet.
FILTERS = [{"team": "ads"}, {"model": "m2"}, {"cluster": "east"}, {"gpus": "9-64"},
           {"team": "feed", "gpus": "1"}, {"model": "m1", "cluster": "east", "gpus": "2-8"}]


@pytest.fixture(autouse=True)
def fleet() -> None:
    scoped_fleet.ingest()


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def figure(html: str, div_id: str) -> list[dict[str, Any]]:
    """A plotly figure's traces as the page ships them (a JSON block, or plotly's script)."""
    found = (re.search(rf'data-target="{div_id}">(.*?)</script>', html, re.S)
             or re.search(r'Plotly\.newPlot\(\s*"' + div_id + r'",\s*(\[.*?\]),\s*\{', html, re.S))
    assert found is not None, div_id
    body = json.loads(found.group(1))
    traces: list[dict[str, Any]] = body["data"] if isinstance(body, dict) else body
    return traces


def tile(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">([^<]*)<', html)
    assert found is not None, element_id
    return found.group(1).strip()


def _every_query(jobs: JobFilter) -> dict[str, Any]:
    """What every fleet and component query answers for March, as plain values."""
    pt2 = calculate(ComponentQuery("pt2_compiler", MARCH, jobs=jobs))
    ckpt = calculate(ComponentQuery("checkpointing", MARCH, "week", jobs=jobs))
    assert pt2 is not None and ckpt is not None
    return {
        "trend": calculate(TrendQuery(MARCH, "day", "none", jobs)).as_api(),
        "trend by team": calculate(TrendQuery(MARCH, "week", "team", jobs)).as_api(),
        "lost": calculate(LostByComponentQuery(MARCH, jobs)).as_api(),
        "lost over time": calculate(LostTrendQuery(MARCH, "day", jobs)).as_api(),
        "top jobs": calculate(TopJobsQuery(MARCH, 10, jobs)).as_api(),
        "lifecycle": calculate(LifecycleQuery(MARCH, "day", jobs)).as_api(),
        "jobs list": calculate(JobsQuery(model=jobs.model, team=jobs.team, cluster=jobs.cluster,
                                         gpus=jobs.gpus, page_size=200)).as_api(),
        "components": calculate(ComponentsIndexQuery(MARCH, jobs)).as_api(),
        "pt2_compiler": pt2.as_api(), "checkpointing": ckpt.as_api(),
    }


@pytest.mark.parametrize("params", FILTERS, ids=lambda p: "&".join(f"{k}={v}"
                                                                   for k, v in p.items()))
def test_every_query_narrows_to_exactly_the_filtered_jobs(params: dict[str, str]) -> None:
    subset = scoped_fleet.matching(**params)
    assert subset and subset != set(scoped_fleet.JOBS)
    whole = _every_query(JobFilter())
    filtered = _every_query(JobFilter(**params))
    assert filtered["trend"]["wall_gpu_s"] < whole["trend"]["wall_gpu_s"]  # it did narrow
    scoped_fleet.keep_only(subset)
    assert filtered == _every_query(JobFilter())


def test_the_ads_teams_numbers_by_hand() -> None:
    """ads: ads-m1-east 2 x 6 h, ads-m2-west 16 x 9 h (4 + 0.5 gap + 4.5), the formula job
    1 x 2 h: wall 12 + 144 + 2 = 158 GPU-h, productive 10 + 112 + 1.5 = 123.5."""
    ads = JobFilter(team="ads")
    trend = calculate(TrendQuery(MARCH, jobs=ads))
    assert (trend.wall_gpu_s / H, trend.productive_gpu_s / H) == (158.0, 123.5)
    lifecycle = calculate(LifecycleQuery(MARCH, jobs=ads))
    assert (lifecycle.failures, lifecycle.recoveries) == (1, 1)
    assert calculate(LifecycleQuery(MARCH, jobs=JobFilter(team="feed"))).failures == 0
    assert [j.job for j in calculate(TopJobsQuery(MARCH, jobs=ads)).jobs] == [
        "ads-m2-west", "ads-m1-east", FORMULA_JOB]


def test_an_unknown_label_matches_nothing() -> None:
    nobody = JobFilter(model="no-such-model")
    assert calculate(TrendQuery(MARCH, jobs=nobody)).points == []
    assert calculate(TopJobsQuery(MARCH, jobs=nobody)).jobs == []


@pytest.mark.parametrize(("fields", "message"), [
    ({"gpus": "7"}, "gpus must be one of 1, 2-8, 9-64, 65-512, 513+, not '7'"),
    ({"team": "t" * 201}, "team must be at most 200 characters, not 201"),
    ({"model": "a\x00b"}, "model contains a NUL character"),
])
def test_a_bad_filter_is_refused_naming_the_field(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        JobFilter(**fields)


def test_the_previous_period_is_as_long_and_just_before() -> None:
    days = DateRange(date(2026, 3, 4), date(2026, 3, 5))
    earlier = TrendQuery(days, "day", "team", JobFilter(team="ads")).previous()
    assert earlier == TrendQuery(DateRange(date(2026, 3, 2), date(2026, 3, 3)), "day", "team",
                                 JobFilter(team="ads"))
    assert TrendQuery(DateRange(date(1900, 1, 1), date(1900, 1, 9))).previous() is None


# --------------------------------------------------------------------------- the page

def test_the_page_shows_the_filtered_jobs_numbers(viewer: Client) -> None:
    html = viewer.get("/fleet/", {**MARCH_PARAMS, "team": "ads"}).content.decode()
    assert tile(html, "range-ett") == pct(100 * 123.5 / 158)
    assert tile(html, "range-lost") == hours(158 - 123.5)
    assert tile(html, "range-failures") == "1"
    top = html[html.index('id="top-jobs"'):html.index('id="lifecycle"')]
    assert re.findall(r'href="/jobs/([^/"]+)/"', top) == ["ads-m2-west", "ads-m1-east",
                                                          "=HYPERLINK(%22x%22)"]
    trend = figure(html, "ett-trend")
    ads = calculate(TrendQuery(MARCH, jobs=JobFilter(team="ads")))
    # Days without data are gaps (None), not points: ads ran on Mar 2, 3 and 5.
    assert [y for y in trend[0]["y"] if y is not None] == pytest.approx(
        [p.ett_pct for p in ads.points])
    assert None in trend[0]["y"]
    lost = figure(html, "lost-by-component")
    assert dict(zip(lost[0]["y"], lost[0]["x"], strict=True)) == pytest.approx(
        {"scheduler": 16 * 0.5, "checkpointing": 16 * 1.5, "pt2_compiler": 2 + 0.5})
    unfiltered = viewer.get("/fleet/", MARCH_PARAMS).content.decode()
    assert tile(unfiltered, "range-ett") != tile(html, "range-ett")


def test_the_url_round_trips_into_the_inputs_and_the_links(viewer: Client) -> None:
    params = {**MARCH_PARAMS, "model": "m1", "team": "ads", "cluster": "east", "gpus": "2-8",
              "compare": "previous", "interval": "week", "group_by": "cluster"}
    html = viewer.get("/fleet/", params).content.decode()
    for name in ("model", "team", "cluster"):
        assert re.search(rf'name="{name}" value="{params[name]}" list="{name}s"', html), name
    assert '<option value="2-8" selected>' in html
    assert re.search(r'name="compare" value="previous"[^>]* checked', html)
    assert '<option value="week" selected>' in html and '<option value="cluster" selected>' in html
    assert '<datalist id="teams"><option value="ads"><option value="feed"></datalist>' in html
    query = ("date_from=2026-03-01&amp;date_to=2026-03-31&amp;interval=week&amp;model=m1"
             "&amp;team=ads&amp;cluster=east&amp;gpus=2-8")
    assert f'href="/components/pt2_compiler/?{query}"' in html
    assert ('href="/?date_from=2026-03-01&amp;date_to=2026-03-31&amp;model=m1&amp;team=ads'
            '&amp;cluster=east&amp;gpus=2-8" id="jobs-link"') in html
    assert "of model m1 · team ads · cluster east · GPUs 2-8." in tile(html, "fleet-scope")
    # What the page's links and inputs submit is the page again, with the same numbers.
    again = viewer.get("/fleet/?" + query.replace("&amp;", "&") + "&group_by=cluster"
                       "&compare=previous").content.decode()
    assert tile(again, "range-ett") == tile(html, "range-ett")


def test_an_unknown_model_is_an_empty_page_that_says_so(viewer: Client) -> None:
    response = viewer.get("/fleet/", {**MARCH_PARAMS, "model": "no-such-model"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="no-jobs"' in html and "model no-such-model" in html
    assert "No rollups in this range." not in html


@pytest.mark.parametrize(("params", "named"), [
    ({"gpus": "7"}, "gpus: Select a valid choice"),
    ({"gpus": "9-64 "}, "gpus: Select a valid choice"),
    ({"team": "t" * 201}, "team: Ensure this value has at most 200 characters"),
    ({"model": "m" * 500}, "model: Ensure this value has at most 200 characters"),
    ({"date_to": "2026-02-30"}, "date_to: must be a day written YYYY-MM-DD"),
    ({"compare": "yes"}, "compare: Select a valid choice"),
    ({"format": "xlsx"}, "format: Select a valid choice"),
    ({"format": "csv", "table": "jobs"}, "table: must be one of lost_by_component, top_jobs, "
                                         "lifecycle, not 'jobs'"),
    ({"format": "csv"}, "table: must be one of"),
])
def test_bad_values_are_a_400_naming_the_parameter(viewer: Client, params: dict[str, str],
                                                   named: str) -> None:
    response = viewer.get("/fleet/", params)
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}")


def test_a_nul_in_a_filter_is_a_400_naming_it(viewer: Client) -> None:
    response = viewer.get("/fleet/?team=a%00b")
    assert response.status_code == 400
    assert "NUL character in query parameter 'team'" in response.content.decode()


# --------------------------------------------------------------------------- the overlay

def test_the_previous_period_is_drawn_only_when_asked_for(viewer: Client) -> None:
    """Mar 4-5 against Mar 2-3, ads only: Mar 2 is ads-m1-east (10/12), Mar 3 ads-m2-west
    (112/144)."""
    days = {"date_from": "2026-03-04", "date_to": "2026-03-05", "team": "ads"}
    plain = viewer.get("/fleet/", days).content.decode()
    assert [t for t in figure(plain, "ett-trend") if t.get("meta") == "previous"] == []
    assert 'id="previous-legend"' not in plain
    html = viewer.get("/fleet/", {**days, "compare": "previous"}).content.decode()
    [previous] = [t for t in figure(html, "ett-trend") if t.get("meta") == "previous"]
    assert previous["line"]["dash"] == "dash"
    assert previous["x"] == ["2026-03-04", "2026-03-05"]  # drawn on the days compared
    assert previous["customdata"] == ["2026-03-02", "2026-03-03"]  # hover: its own days
    assert "%{customdata}" in previous["hovertemplate"]
    assert previous["y"] == pytest.approx([100 * 10 / 12, 100 * 112 / 144])
    assert "2026-03-02 to 2026-03-03" in tile(html, "previous-legend")


def test_the_net_change_stays_the_ranges_own(viewer: Client) -> None:
    """Mar 4 (feed-m2-west, 5/6) to Mar 5 (the formula job, 1.5/2): -8.33 pts, with or
    without Mar 2-3 drawn beneath."""
    days = {"date_from": "2026-03-04", "date_to": "2026-03-05"}
    plain = viewer.get("/fleet/", days).content.decode()
    html = viewer.get("/fleet/", {**days, "compare": "previous"}).content.decode()
    assert tile(html, "trend-change") == tile(plain, "trend-change") == (
        "\u22128.33 pts from the first day to the last")
    [previous] = [t for t in figure(html, "ett-trend") if t.get("meta") == "previous"]
    assert previous["y"] == pytest.approx([100 * 106 / 140, 100 * 112 / 144])


def test_a_grouped_overlay_dashes_each_group_in_its_own_colour(viewer: Client) -> None:
    html = viewer.get("/fleet/", {"date_from": "2026-03-04", "date_to": "2026-03-05",
                                  "group_by": "team", "compare": "previous"}).content.decode()
    traces = figure(html, "ett-trend")
    lines = {t["name"]: t for t in traces if t.get("meta") is None}
    dashed = {t["name"]: t for t in traces if t.get("meta") == "previous"}
    assert set(lines) == {"ads", "feed"} and set(dashed) == {"ads (previous)", "feed (previous)"}
    for team in ("ads", "feed"):
        assert dashed[f"{team} (previous)"]["line"]["color"] == lines[team]["line"]["color"]


# --------------------------------------------------------------------------- CSV

def _csv(client: Client, **params: str) -> list[list[str]]:
    response = client.get("/fleet/", {**MARCH_PARAMS, "format": "csv", **params})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_every_table_exports_the_pages_filtered_rows_neutralized(viewer: Client) -> None:
    top = _csv(viewer, table="top_jobs", team="ads")
    assert top[0] == ["job", "lost_gpu_hours", "ett_pct", "gpus", "status", "team", "model",
                      "cluster"]
    assert [row[0] for row in top[1:]] == ["ads-m2-west", "ads-m1-east", "'" + FORMULA_JOB]
    assert float(top[1][1]) == pytest.approx(16 * 2.0)  # ckpt load 1.5 + the 0.5 h gap
    lost = _csv(viewer, table="lost_by_component", team="ads")
    assert {row[0]: float(row[1]) for row in lost[1:]} == pytest.approx(
        {"checkpointing": 24.0, "scheduler": 8.0, "pt2_compiler": 2.5})
    lifecycle = _csv(viewer, table="lifecycle", gpus="9-64")
    assert lifecycle[0][0] == "period"
    assert {row[0]: int(row[-1]) for row in lifecycle[1:]} == {"2026-03-02": 0,
                                                               "2026-03-03": 1}


def test_the_page_links_each_tables_csv_with_its_filter(viewer: Client) -> None:
    html = viewer.get("/fleet/", {**MARCH_PARAMS, "cluster": "west"}).content.decode()
    for table, element in (("lost_by_component", "lost-csv"), ("top_jobs", "top-jobs-csv"),
                           ("lifecycle", "lifecycle-csv")):
        found = re.search(rf'href="\?([^"]+)" id="{element}"', html)
        assert found is not None, element
        link = found.group(1).replace("&amp;", "&")
        assert "cluster=west" in link and f"table={table}" in link and "format=csv" in link


def test_a_weekly_overlay_moves_by_whole_weeks() -> None:
    assert trend_figures.overlay_shift(30, "day") == timedelta(days=30)
    assert trend_figures.overlay_shift(30, "week") == timedelta(days=28)  # Mondays land on Mondays
    assert trend_figures.overlay_shift(3, "week") == timedelta(days=7)


def test_hostile_group_names_are_escaped_in_the_overlay(viewer: Client) -> None:
    evil = "<script>alert(1)</script>"
    events = [mark("x", 0, "attempt_start", datetime(2026, 3, day, tzinfo=UTC).timestamp(),
                   attrs={"gpus": 1, "team": evil}) for day in (2, 4)]
    ingest_batch([json.dumps({"v": 1, "id": f"evil{i}", **e}) for i, e in enumerate(events)])
    html = viewer.get("/fleet/", {"date_from": "2026-03-04", "date_to": "2026-03-05",
                                  "group_by": "team", "compare": "previous"}).content.decode()
    names = [t["name"] for t in figure(html, "ett-trend")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; (previous)" in names
    assert not any("<script" in name for name in names)
    assert "<script>alert(1)" not in html
