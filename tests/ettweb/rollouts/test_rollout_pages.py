"""The rollout pages: list, staff create/edit, and one rollout's impact as the API has it."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.queries import ImpactQuery, JobFilter, RolloutListQuery, calculate
from ettweb.rollouts.models import Rollout
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

pytestmark = pytest.mark.django_db

FORM = {"name": "compile cache", "component": "pt2_compiler", "at": "2026-03-10T12:00",
        "models": "", "teams": "ads", "clusters": "", "job_pattern": "", "notes": "",
        "link": ""}


@pytest.fixture
def staff(client: Client) -> Client:
    user = User.objects.create_user("owner", password="pw", is_superuser=True)
    client.force_login(user)
    return client


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer", password="pw"))
    return client


@pytest.fixture
def fleet() -> None:
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"ads-b{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ads-a{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
        events += day_job(f"feed-b{n}", 8 + n % 2, 2, "feed", ("compile", n % 3), 10 - n % 3)
        events += day_job(f"feed-a{n}", 11 + n % 2, 2, "feed", ("compile", n % 2), 10 - n % 2)
    store(events)


def make(**fields: Any) -> Rollout:
    values = {"name": "compile cache", "component": "pt2_compiler",
              "at": datetime(2026, 3, 10, 12, tzinfo=UTC), "scope": {"teams": ["ads"]},
              **fields}
    return Rollout.objects.create(**values)


def test_staff_creates_a_rollout_and_lands_on_its_page(staff: Client, fleet: None) -> None:
    response = staff.post("/rollouts/new/", FORM)
    rollout = Rollout.objects.get()
    assert response.status_code == 302 and response.url == f"/rollouts/{rollout.pk}/"
    assert rollout.scope == {"teams": ["ads"]}
    assert rollout.at == datetime(2026, 3, 10, 12, tzinfo=UTC)
    assert rollout.created_by and rollout.created_by.username == "owner"
    page = staff.get(response.url).content.decode()
    assert 'id="treated-change">+10.00 pts<' in page
    for chart in ("impact-trend", "change-intervals", "job-distributions", "component-shifts"):
        assert f'id="{chart}"' in page


@pytest.mark.parametrize(("change", "message"), [
    ({"component": "ckpt"}, "Select a valid choice"),
    ({"name": " "}, "This field is required"),
    ({"teams": " , ,"}, "scope.teams: given with no values"),
    ({"link": "javascript:alert(1)"}, "link: must be an http:// or https:// URL"),
    ({"at": "soon"}, "Enter a valid date/time"),
])
def test_form_errors_name_the_field(staff: Client, change: dict[str, str], message: str) -> None:
    response = staff.post("/rollouts/new/", {**FORM, **change})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Rollout.objects.exists()


def test_edit_keeps_the_creator_and_moves_the_numbers(staff: Client, fleet: None) -> None:
    rollout = make()
    before = calculate(ImpactQuery(rollout.pk, 2))
    response = staff.post(f"/rollouts/{rollout.pk}/edit/", {**FORM, "teams": "feed"})
    assert response.status_code == 302
    rollout.refresh_from_db()
    assert rollout.scope == {"teams": ["feed"]}
    after = calculate(ImpactQuery(rollout.pk, 2))
    assert before and after and before.treated != after.treated
    form = staff.get(f"/rollouts/{rollout.pk}/edit/").content.decode()
    assert 'value="feed"' in form


def test_non_staff_may_look_but_not_edit(viewer: Client, fleet: None) -> None:
    rollout = make()
    assert viewer.get("/rollouts/new/").status_code == 403
    assert viewer.post(f"/rollouts/{rollout.pk}/edit/", FORM).status_code == 403
    assert viewer.get(f"/rollouts/{rollout.pk}/").status_code == 200
    assert viewer.get("/rollouts/").status_code == 200


def test_page_shows_what_the_api_answers(viewer: Client, fleet: None) -> None:
    rollout = make()
    result = calculate(ImpactQuery(rollout.pk, 2))
    assert result and result.did_pts is not None and result.did_ci95_pts
    page = viewer.get(f"/rollouts/{rollout.pk}/?window=2").content.decode()
    assert f'id="did">{result.did_pts:+.2f} pts<' in page
    low, high = result.did_ci95_pts
    assert f'id="did-ci">[{low:+.2f}, {high:+.2f}] pts<' in page
    assert f'id="verdict">{result.verdict}<' in page


@pytest.mark.parametrize("window", ["0", "91", "x"])
def test_bad_window_is_a_400_naming_it(viewer: Client, window: str) -> None:
    rollout = make()
    response = viewer.get(f"/rollouts/{rollout.pk}/?window={window}")
    assert response.status_code == 400
    assert response.content.decode().startswith("bad parameters: window:")


def test_windows_without_jobs_say_so(viewer: Client) -> None:
    rollout = make()
    response = viewer.get(f"/rollouts/{rollout.pk}/")
    assert response.status_code == 200
    assert 'id="no-jobs"' in response.content.decode()
    assert viewer.get("/rollouts/424242/").status_code == 404


def test_user_text_is_escaped(viewer: Client, fleet: None) -> None:
    rollout = make(name="<script>alert(1)</script>", notes="<img src=x onerror=alert(2)>",
                   scope={"job_pattern": "<b>*"})
    for path in (f"/rollouts/{rollout.pk}/", "/rollouts/"):
        page = viewer.get(path).content.decode()
        assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
        assert "<img src=x" not in page and "<b>*" not in page


def test_list_filters_and_bad_filters(viewer: Client) -> None:
    make(name="first", at=datetime(2026, 3, 1, tzinfo=UTC))
    make(name="second", component="checkpointing", at=datetime(2026, 3, 20, tzinfo=UTC))
    page = viewer.get("/rollouts/?component=checkpointing").content.decode()
    assert "second" in page and "first" not in page
    page = viewer.get("/rollouts/?date_from=2026-03-01&date_to=2026-03-05").content.decode()
    assert "first" in page and "second" not in page
    response = viewer.get("/rollouts/?date_from=2026-03-09&date_to=2026-03-01")
    assert response.status_code == 400
    assert viewer.get("/rollouts/?date_from=march").status_code == 400


# --------------------------------------------------------------------------- list filters

def test_list_keeps_the_rollouts_whose_scope_can_reach_the_labels(viewer: Client) -> None:
    """Issue 14, item 1: model, team and cluster keep the rollouts whose scope lists the value
    or leaves that field out; a job_pattern never rules one out."""
    names = {"fleet": {}, "ads": {"teams": ["ads"]}, "feed m1": {"teams": ["feed"],
                                                                 "models": ["m1"]},
             "east": {"clusters": ["east", "west"]}, "pattern": {"job_pattern": "x-*"}}
    for name, scope in names.items():
        make(name=name, scope=scope)

    def listed(query: str) -> set[str]:
        page = viewer.get(f"/rollouts/?{query}").content.decode()
        return set(re.findall(r'href="/rollouts/\d+/">([^<]+)</a>', page))

    assert listed("team=ads") == {"fleet", "ads", "east", "pattern"}
    assert listed("team=feed&model=m1") == {"fleet", "feed m1", "east", "pattern"}
    assert listed("team=feed&model=m2") == {"fleet", "east", "pattern"}
    assert listed("cluster=north") == {"fleet", "ads", "feed m1", "pattern"}
    assert listed("model=no-such-model&team=ads&component=checkpointing") == set()
    result = calculate(RolloutListQuery(jobs=JobFilter(team="ads")))
    assert {row.marker.name for row in result.rows} == listed("team=ads") and result.total == 4


def test_list_filters_round_trip_and_export_csv_neutralized(viewer: Client) -> None:
    make(name="=HYPERLINK(1)", scope={"teams": ["ads"]})
    make(name="other", scope={"teams": ["feed"]})
    query = {"component": "pt2_compiler", "date_from": "2026-03-01", "date_to": "2026-03-31",
             "team": "ads", "model": "dlrm", "cluster": "east"}
    page = viewer.get("/rollouts/", query).content.decode()
    for name in ("team", "model", "cluster"):
        assert re.search(rf'name="{name}" value="{query[name]}"', page), name
    assert 'name="component" value="pt2_compiler"' in page
    assert 'name="date_from" value="2026-03-01"' in page
    csv_link = re.search(r'href="\?([^"]+)" id="rollouts-csv"', page)
    assert csv_link is not None
    response = viewer.get("/rollouts/?" + csv_link.group(1).replace("&amp;", "&"))
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["id", "at", "name", "component", "scope", "created_by", "simulated",
                       "link", "component_verdict", "component_change_pts",
                       "component_ci_low", "component_ci_high", "ett_verdict",
                       "ett_change_pts", "ett_ci_low", "ett_ci_high"]
    assert [row[2] for row in rows[1:]] == ["'=HYPERLINK(1)"]  # "other" is feed's only
    assert rows[1][4] == "teams ads"


@pytest.mark.parametrize(("query", "named"), [
    ("team=" + "t" * 201, "team: Ensure this value has at most 200 characters"),
    ("format=csv&table=jobs", "table: must be one of rollouts, not 'jobs'"),
    ("format=csv", "table: must be one of rollouts"),
    ("date_from=2026-03-09&date_to=2026-03-01", "date_from 2026-03-09 is after"),
])
def test_bad_list_filters_are_a_400_naming_them(viewer: Client, query: str, named: str) -> None:
    response = viewer.get(f"/rollouts/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}")


@pytest.mark.parametrize(("query", "named"), [
    ("verdict=great", "verdict: Select a valid choice"),
    ("sort=name", "sort: Select a valid choice"),
])
def test_bad_verdict_or_sort_is_a_400_naming_it(viewer: Client, query: str, named: str) -> None:
    response = viewer.get(f"/rollouts/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {named}")


def test_list_shows_the_warm_pass_verdicts_sorted_and_filtered(viewer: Client,
                                                               fleet: None) -> None:
    """Each rollout's component verdict and adjusted ETT% change come from the warm pass's
    stored 14-day impact; one the warm pass has not reached says so."""
    from ettweb.queries.impact import ImpactResult
    from ettweb.rollouts.warm import warm_impacts

    gain = make(name="gain")
    nothing = make(name="nothing", component="evaluation", scope={"teams": ["feed"]},
                   at=datetime(2026, 3, 10, 13, tzinfo=UTC))
    warm_impacts(windows=(14,))
    make(name="late", at=datetime(2026, 3, 10, 14, tzinfo=UTC))  # after the pass

    def impact_of(r: Rollout) -> ImpactResult:
        result = calculate(ImpactQuery(r.pk, 14))
        assert result is not None
        return result

    computed = {"gain": impact_of(gain), "nothing": impact_of(nothing)}
    page = viewer.get("/rollouts/").content.decode()
    effect, adjusted = computed["gain"].component_effect, computed["gain"].adjusted
    assert f"{effect.deciding_pts:+.2f} pts" in page
    assert f"{adjusted.deciding_pts:+.2f} pts" in page
    assert page.count("not computed yet") == 1
    assert page.index("late") < page.index("not computed yet") < page.index(">gain<")

    def names(query: str) -> list[str]:
        body = viewer.get(f"/rollouts/?format=csv&table=rollouts&{query}").content.decode()
        return [line.split(",")[2] for line in body.strip().splitlines()[1:]]

    assert names("") == ["late", "nothing", "gain"]  # newest first
    by_ett = sorted(computed, key=lambda n: -(computed[n].adjusted.deciding_pts or 0.0))
    assert names("sort=-ett_change") == [*by_ett, "late"]  # not computed: last either way
    assert names("sort=ett_change") == [*reversed(by_ett), "late"]
    assert names("verdict=not_computed") == ["late"]
    for verdict in ("reduced", "increased"):
        assert names(f"verdict={verdict}") == [
            n for n in ("nothing", "gain") if computed[n].component_effect.verdict == verdict]
    for verdict in ("improved", "regressed"):
        assert names(f"verdict={verdict}") == [
            n for n in ("nothing", "gain") if computed[n].adjusted.verdict == verdict]
