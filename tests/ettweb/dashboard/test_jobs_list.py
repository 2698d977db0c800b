"""``/`` at fleet scale: the jobs list filters, sorts and pages in Postgres, totals the
filtered set (its GPU-weighted ETT% and lost time per component), exports CSV with formula
cells neutralized, and answers the same as ``/api/v1/jobs``."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token
from ettweb.attribution.components import component_of
from ettweb.pages.csv_tables import neutralized
from ettweb.queries import JobsQuery, calculate
from ettweb.queries.base import phase_components
from ettweb.queries.job_list import MAX_SEARCH_CHARS
from ettweb.rollups.models import JobRollup
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet() -> None:
    events: list[dict[str, Any]] = []
    for n in range(12):  # 12 ads jobs on 2026-03-0n..., lost 1 h of compile each, 2 GPUs
        events += day_job(f"ads-{n:02d}", 1 + n, 2, "ads", ("compile", 1), 1 + n)
    events += day_job("=HYPERLINK(1)", 20, 8, "feed", ("checkpoint_save", 2), 4)
    store(events)


@pytest.fixture
def logged_in(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def test_pages_sort_and_total_the_filtered_set(fleet: None) -> None:
    first = calculate(JobsQuery(sort="-ett_pct", page_size=5))
    assert (first.total, first.pages, len(first.jobs)) == (13, 3, 5)
    ett = [row.ett_pct for row in first.jobs]
    assert ett == sorted(ett, reverse=True)
    third = calculate(JobsQuery(sort="-ett_pct", page_size=5, page=3))
    assert len(third.jobs) == 3 and third.jobs[-1].ett_pct <= ett[-1]
    beyond = calculate(JobsQuery(page=99, page_size=5))
    assert beyond.page == 3  # a page past the end shows the last one
    ads = calculate(JobsQuery(team="ads"))
    rollups = JobRollup.objects.filter(team="ads")
    wall = sum(r.wall_gpu_s for r in rollups)
    assert ads.total == 12 and ads.wall_gpu_s == pytest.approx(wall)
    assert ads.ett_pct == pytest.approx(100 * sum(r.productive_gpu_s for r in rollups) / wall)
    assert ads.lost_by_component_gpu_s == pytest.approx({"pt2_compiler": 12 * 2 * 3600.0})
    # Unfiltered, the sum reads the lost rows without a join: the same numbers as every
    # rollup's own lost_gpu_s, folded per owning component.
    every: dict[str, float] = {}
    for rollup in JobRollup.objects.all():
        for category, gpu_s in rollup.lost_gpu_s.items():
            owner = component_of(category, phase_components())
            every[owner] = every.get(owner, 0.0) + gpu_s
    assert first.lost_by_component_gpu_s == pytest.approx(every) and len(every) >= 2
    assert calculate(JobsQuery(gpus="2-8", team="feed")).total == 1
    assert calculate(JobsQuery(search="ads-1")).total == 2  # ads-10, ads-11


def test_a_range_keeps_jobs_whose_window_overlaps_it(fleet: None) -> None:
    from datetime import date

    from ettweb.queries import DateRange

    march_3_to_4 = DateRange(date(2026, 3, 3), date(2026, 3, 4))
    assert {r.job for r in calculate(JobsQuery(range=march_3_to_4)).jobs} == {"ads-02",
                                                                              "ads-03"}


def test_the_page_shows_one_page_with_sort_links_and_escapes_names(logged_in: Client,
                                                                    fleet: None) -> None:
    html = logged_in.get("/?page_size=5&sort=-gpus").content.decode()
    assert html.count('href="/jobs/') == 5
    assert 'id="jobs-total">13<' in html
    assert "=HYPERLINK(1)" in html  # escaped text, first by GPUs
    assert re.search(r'href="\?[^"]*sort=gpus', html)  # clicking GPUs again flips the order
    assert 'id="jobs-next"' in html and 'id="jobs-previous"' not in html
    assert 'id="fleet-lost"' in html
    feed = logged_in.get("/?team=feed").content.decode()
    assert 'id="jobs-total">1<' in feed
    none = logged_in.get("/?team=nobody").content.decode()
    assert 'id="no-jobs"' in none


def test_csv_exports_every_matching_job_with_formulas_neutralized(logged_in: Client,
                                                                   fleet: None) -> None:
    response = logged_in.get("/?format=csv&page_size=5&sort=job")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["job", "model", "team"] and len(rows) == 14  # header + every job
    assert rows[1][0] == "'=HYPERLINK(1)"  # sorted by job: '=' first; a text cell, not a formula
    assert neutralized("-1") == "'-1" and neutralized(-1.5) == -1.5 and neutralized("ok") == "ok"


@pytest.mark.parametrize(("query", "named"), [
    ("sort=nonsense", "sort:"), ("gpus=7", "gpus:"), ("status=asleep", "status:"),
    ("page=0", "page:"), ("page_size=1000", "page_size:"), ("date_from=2026-02-30", "date_from:"),
    ("date_from=9999-12-31", "date_from: must be a day from 1900-01-01 to 9999-12-30"),
    ("format=xml", "format: Select a valid choice. xml is not one of the available choices. "
                   "(one of csv)"),
    ("date_from=2026-03-05&date_to=2026-03-01", "date_from 2026-03-05 is after")])
def test_bad_parameters_are_a_400_naming_them(logged_in: Client, query: str, named: str) -> None:
    response = logged_in.get(f"/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}")


def test_the_api_answers_what_the_page_shows(client: Client, fleet: None) -> None:
    token = issue_token(User.objects.create_user("reader"), "jobs test")
    body = client.get("/api/v1/jobs?team=ads&sort=-ett_pct&page_size=4",
                      HTTP_AUTHORIZATION=f"Bearer {token}").json()
    query = JobsQuery(team="ads", sort="-ett_pct", page_size=4)
    assert body == {**query.scope_api(), **calculate(query).as_api()}
    assert body["filter"]["team"] == "ads" and body["date_from"] is None
    assert body["total"] == 12 and len(body["jobs"]) == 4
    bad = client.get("/api/v1/jobs?sort=nope", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert bad.status_code == 400 and bad.json()["error"].startswith("sort:")


def test_the_table_has_model_and_cluster_and_marks_the_sorted_column(logged_in: Client,
                                                                     fleet: None) -> None:
    html = logged_in.get("/?sort=ett_pct").content.decode()
    head = html[html.index("<thead>"):html.index("</thead>")]
    headings = re.findall(r"<th[^>]*>(?:<a [^>]*>)?([^<]+)", head)
    assert [h.strip() for h in headings][:4] == ["Job", "Model", "Team", "Cluster"]
    assert re.search(r'aria-sort="ascending"><a [^>]*>ETT% <span class="sort-arrow">↑', head)
    assert head.count("sort-arrow") == 1
    default = logged_in.get("/").content.decode()
    assert re.search(r'aria-sort="descending"><a [^>]*>Lost GPU-hours <span class="sort-arrow">↓',
                     default)
    assert '<td class="num nowrap">' in default  # wall times do not wrap


def test_a_page_past_the_last_is_refused_with_the_count(logged_in: Client, fleet: None) -> None:
    response = logged_in.get("/?page=999999&page_size=10")
    assert response.status_code == 400
    pages = -(-JobRollup.objects.count() // 10)
    assert response.content.decode() == (f"bad parameters: page: 999999 is past the last page, "
                                         f"{pages}")
    token = issue_token(User.objects.create_user("reader2"), "jobs")
    api = logged_in.get("/api/v1/jobs?page=999999", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.status_code == 400 and api.json()["error"].startswith("page: 999999 is past")


def test_the_api_limits_the_search_text_as_the_page_does(logged_in: Client) -> None:
    """One limit, ``MAX_SEARCH_CHARS``, for ``/`` and ``/api/v1/jobs`` (issue 40, 4e: the API
    took a 3,000-character ``q`` the page refused past 200); the JSON error names the
    parameter and the limit."""
    token = issue_token(User.objects.create_user("reader3"), "jobs")
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert MAX_SEARCH_CHARS == 200
    at_limit = logged_in.get("/api/v1/jobs", {"q": "j" * MAX_SEARCH_CHARS}, **bearer)
    assert at_limit.status_code == 200, at_limit.content
    assert logged_in.get("/", {"q": "j" * MAX_SEARCH_CHARS}).status_code == 200
    for length in (MAX_SEARCH_CHARS + 1, 3000):
        api = logged_in.get("/api/v1/jobs", {"q": "j" * length}, **bearer)
        assert api.status_code == 400
        assert api.json() == {"error": f"q: q must be at most 200 characters, not {length}"}
        page = logged_in.get("/", {"q": "j" * length})
        assert page.status_code == 400
        assert page.content.decode().startswith(
            f"bad parameters: q: Ensure this value has at most 200 characters (it has {length})")
    for name in ("model", "team", "cluster"):
        long_label = logged_in.get("/api/v1/jobs", {name: "x" * 201}, **bearer)
        assert long_label.status_code == 400
        assert long_label.json() == {
            "error": f"{name}: {name} must be at most 200 characters, not 201"}
    with pytest.raises(ValueError, match="q contains a NUL character"):
        JobsQuery(search="a\x00b")  # the middleware refuses it first on the way in
