"""Detected changes as users meet them: matched to rollouts when read (ETT_SPEC §6.3's
``rollout_id``), ``GET /api/v1/changes`` and its 400s, the ``/changes/`` page with its
*Record a rollout* link, the marks on the component page and the fleet trend, and the
weekly e-mail's unrecorded changes for the subscriber's components.

The fleet is ``fleet.py``'s: team ads' evaluation share steps up on Feb 21, 2026, found by
the beat task for the team and for the fleet."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.roles import set_role
from ettweb.changes.detection import detect_changes
from ettweb.changes.models import Change
from ettweb.queries import ChangesQuery, IsoWeek, calculate
from ettweb.reports.content import ReportCache, render_for
from ettweb.reports.models import Subscription
from ettweb.rollouts.models import Rollout
from tests.ettweb.changes.fleet import STEP_DAY, ingest_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def changes() -> None:
    ingest_fleet()
    assert detect_changes().changes == 2


def _rollout(days_from_step: float, *, component: str = "evaluation",
             scope: dict[str, Any] | None = None, name: str = "new eval set") -> Rollout:
    at = datetime(STEP_DAY.year, STEP_DAY.month, STEP_DAY.day, 10, tzinfo=UTC) + timedelta(
        days=days_from_step)
    return Rollout.objects.create(name=name, component=component, at=at, scope=scope or {})


def _matches() -> dict[str | None, int | None]:
    return {c.team: c.rollout_id for c in calculate(ChangesQuery()).changes}


def _login(client: Client, role: str, *components: str) -> Client:
    user = User.objects.create_user(f"{role}-user", password="pw-1-long-enough")
    if role == "superuser":
        user.is_superuser = True
        user.save()
    else:
        set_role(user, role, components)  # type: ignore[arg-type]
    client.force_login(user)
    return client


# --------------------------------------------------------------------------- matching

def test_a_change_no_rollout_explains_is_unrecorded() -> None:
    assert _matches() == {None: None, "ads": None}
    _rollout(0, component="checkpointing")  # another component explains nothing
    assert _matches() == {None: None, "ads": None}


def test_a_rollout_within_two_days_explains_it_read_at_once() -> None:
    """Recorded after detection ran: matching happens when read, so it counts at once."""
    rollout = _rollout(-2)
    assert _matches() == {None: rollout.pk, "ads": rollout.pk}
    rollout.at -= timedelta(days=1)  # three days before: too far
    rollout.save()
    assert _matches() == {None: None, "ads": None}
    late = _rollout(2.5)  # 10:00 on the second day after: within 2 UTC days
    assert _matches() == {None: late.pk, "ads": late.pk}


def test_a_team_series_needs_a_scope_that_holds_the_team() -> None:
    feed_only = _rollout(0, scope={"teams": ["feed"]})
    assert _matches() == {None: feed_only.pk, "ads": None}  # the fleet's: any rollout
    by_model = _rollout(1, scope={"models": ["dlrm"]}, name="model-wide")
    assert _matches() == {None: feed_only.pk, "ads": by_model.pk}


def test_the_nearest_rollout_to_the_day_before_wins() -> None:
    """Rollouts usually land during the day before the first day at the new level."""
    _rollout(1, name="the day after")
    day_before = _rollout(-1, name="the day before")
    assert _matches() == {None: day_before.pk, "ads": day_before.pk}


# --------------------------------------------------------------------------- API

def test_the_api_lists_the_changes_with_the_specs_fields(client: Client) -> None:
    _login(client, "viewer")
    rollout = _rollout(-1)
    body = client.get("/api/v1/changes").json()
    assert [c["team"] for c in body["changes"]] == [None, "ads"]
    ads = body["changes"][1]
    stored = Change.objects.get(team="ads")
    assert ads == {"component": "evaluation", "team": "ads", "day": STEP_DAY.isoformat(),
                   "before_lost_pct": stored.before_lost_pct,
                   "after_lost_pct": stored.after_lost_pct,
                   "change_pts": stored.after_lost_pct - stored.before_lost_pct,
                   "rollout_id": rollout.pk}
    day = STEP_DAY.isoformat()
    assert len(client.get(f"/api/v1/changes?date_from={day}&date_to={day}&team=ads")
               .json()["changes"]) == 1
    before = STEP_DAY - timedelta(days=1)
    assert client.get(f"/api/v1/changes?date_to={before}").json() == {
        "date_from": None, "date_to": before.isoformat(),
        "filter": {"component": "", "team": ""}, "changes": []}
    assert client.get("/api/v1/changes?component=evaluation&team=feed").json()[
        "changes"] == []


@pytest.mark.parametrize(("query", "parameter", "problem"), [
    ("date_from=2026-02-30", "date_from", ""),
    ("date_to=yesterday", "date_to", ""),
    ("date_from=2026-03-01&date_to=2026-02-01", "date_from", "after date_to"),
    ("component=gpu_fairies", "component", "unknown component 'gpu_fairies'"),
    ("team=nobody", "team", "unknown team 'nobody'"),
])
def test_a_bad_api_parameter_is_a_400_naming_it(client: Client, query: str, parameter: str,
                                                problem: str) -> None:
    _login(client, "viewer")
    response = client.get(f"/api/v1/changes?{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error.startswith(f"{parameter}: ") or f"'{parameter}'" in error, error
    assert problem in error


def test_the_api_needs_a_login(client: Client) -> None:
    assert client.get("/api/v1/changes").status_code == 401


# --------------------------------------------------------------------------- the page

def test_the_page_lists_each_change_with_its_rollout_or_a_way_to_record_one(
        client: Client) -> None:
    _login(client, "owner", "evaluation")
    page = client.get("/changes/").content.decode()
    rows = re.findall(r'<tr class="(unrecorded|recorded)">(.*?)</tr>', page, re.S)
    assert [kind for kind, _ in rows] == ["unrecorded", "unrecorded"]
    assert all(STEP_DAY.isoformat() in row and "evaluation" in row for _, row in rows)
    assert "whole fleet" in rows[0][1] and "team ads" in rows[1][1]
    links = re.findall(r'class="record-link" href="([^"]+)"', page)
    assert len(links) == 2
    team_link = links[1].replace("&amp;", "&")
    assert team_link == (f"/rollouts/new/?component=evaluation&at={STEP_DAY}T00%3A00"
                         "&teams=ads")
    form = client.get(team_link).content.decode()  # prefilled with the change
    assert re.search(r'name="component"[^>]*value="evaluation"|<option value="evaluation" '
                     r'selected', form), form
    assert f'value="{STEP_DAY}T00:00"' in form
    assert re.search(r'name="teams"[^>]*value="ads"', form)

    rollout = _rollout(-1)
    page = client.get("/changes/").content.decode()
    assert page.count('<tr class="recorded">') == 2 and "record-link" not in page
    assert f'href="/rollouts/{rollout.pk}/"' in page


def test_only_owners_of_the_component_and_admins_get_the_record_link(client: Client) -> None:
    _login(client, "owner", "checkpointing")
    page = client.get("/changes/").content.decode()
    assert "record-link" not in page and page.count('<tr class="unrecorded">') == 2
    client.logout()
    _login(client, "superuser")
    assert client.get("/changes/").content.decode().count("record-link") == 2


def test_the_page_filters_and_refuses_bad_filters_by_name(client: Client) -> None:
    _login(client, "viewer")
    page = client.get("/changes/?team=ads").content.decode()
    assert page.count("<tr class=") == 1 and "team ads" in page
    assert 'id="no-changes"' in client.get("/changes/?team=feed").content.decode()
    for query, name in (("team=nobody", "team"), ("component=nope", "component"),
                        ("date_from=2026-13-01", "date_from")):
        response = client.get(f"/changes/?{query}")
        assert response.status_code == 400
        assert name in response.content.decode()


def test_with_nothing_detected_the_page_says_so(client: Client) -> None:
    Change.objects.all().delete()
    _login(client, "viewer")
    page = client.get("/changes/").content.decode()
    assert "No changes detected yet" in page


# --------------------------------------------------------------------------- marks

def _figure(page: str, div: str) -> dict[str, Any]:
    """The plotly figure JSON a chart fragment carries."""
    match = re.search(rf'<script type="application/json" class="ett-figure" '
                      rf'data-target="{div}">(.*?)</script>', page, re.S)
    assert match, f"no figure data for {div}"
    return dict(json.loads(match.group(1)))


def _marks(figure: dict[str, Any]) -> dict[str, Any]:
    (trace,) = [t for t in figure["data"] if t.get("meta") == "changes"]
    return dict(trace)


def test_the_component_page_and_the_fleet_trend_mark_the_changes(client: Client) -> None:
    _login(client, "viewer")
    params = "date_from=2026-02-01&date_to=2026-03-12"
    page = client.get(f"/components/evaluation/?{params}&team=ads").content.decode()
    assert 'id="change-legend"' in page
    marks = _marks(_figure(page, "component-share"))
    assert marks["x"] == [f"{STEP_DAY} 00:00:00"]  # the team's change only
    assert marks["marker"]["symbol"] == ["triangle-up"]  # filled: unrecorded
    assert "Unrecorded change" in marks["hovertext"][0]
    assert marks["customdata"][0].startswith("/changes/?component=evaluation&team=ads")

    rollout = _rollout(-1)
    fleet = client.get(f"/fleet/?{params}").content.decode()
    marks = _marks(_figure(fleet, "ett-trend"))
    assert len(marks["x"]) == 2 and set(marks["marker"]["symbol"]) == {"triangle-up-open"}
    assert set(marks["customdata"]) == {f"/rollouts/{rollout.pk}/"}
    outside = client.get("/components/evaluation/?date_from=2026-02-01&date_to=2026-02-15")
    assert 'id="change-legend"' not in outside.content.decode()


# --------------------------------------------------------------------------- e-mail

def test_the_weekly_email_lists_the_weeks_unrecorded_changes_for_its_components() -> None:
    week = IsoWeek.of(STEP_DAY)
    alice = User.objects.create_user("alice", email="alice@example.com")
    theirs = Subscription.objects.create(user=alice, email=alice.email, fleet=False,
                                         components=["evaluation"])
    report = render_for(theirs, week, ReportCache(), with_chart=False)
    assert "UNRECORDED CHANGES THIS WEEK (your components)" in report.text
    assert f"evaluation, team ads, from {STEP_DAY:%a} {STEP_DAY.day} {STEP_DAY:%b}" in report.text
    assert "evaluation, whole fleet" in report.text
    assert "/changes/?component=evaluation&team=ads" in report.text.replace("&amp;", "&")
    assert 'id="unrecorded-changes"' in report.html

    bob = User.objects.create_user("bob", email="bob@example.com")
    other = Subscription.objects.create(user=bob, email=bob.email, fleet=False,
                                        components=["checkpointing"])
    text = render_for(other, week, ReportCache(), with_chart=False).text
    assert "evaluation, team ads" not in text

    _rollout(-1)  # recorded now: no longer listed
    text = render_for(theirs, week, ReportCache(), with_chart=False).text
    section = text.split("UNRECORDED CHANGES THIS WEEK", 1)[1]
    assert "None this week." in section.split("Dashboard for this week", 1)[0]
    before = render_for(theirs, IsoWeek.of(date(2026, 2, 9)), ReportCache(),
                        with_chart=False).text
    assert "evaluation, team ads" not in before
