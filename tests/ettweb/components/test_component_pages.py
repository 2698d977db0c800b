"""Component pages and their queries on the hand-built fleet of ``fleet.py``.

Numbers are GPU-hours (``H``) with the arithmetic written out: per day the fleet's wall time
is 12 (Mar 1), 32 (Mar 2) and 10 (Mar 3) GPU-hours and its lost time 3 + 4 + 2 + 2 = 11.
pt2_compiler owns ``compile``: 2 (a) + 4 (b) + 2 (d) = 8; checkpointing owns the checkpoint
phases: 1 (a) + 2 (c) = 3.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from ettweb.access.models import ComponentOwner
from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token
from ettweb.components.models import Component
from ettweb.queries import (
    ComponentQuery,
    ComponentsIndexQuery,
    DateRange,
    ImpactQuery,
    TrendQuery,
    calculate,
)
from ettweb.rollouts.models import Rollout
from ettweb.rollups.models import PhaseComponent
from tests.ettweb.charts import traces_of
from tests.ettweb.components.fleet import ingest_fleet

pytestmark = pytest.mark.django_db

H = 3600.0
WHOLE = DateRange(date(2026, 2, 1), date(2026, 3, 31))
RANGE = {"date_from": "2026-02-01", "date_to": "2026-03-31"}


@pytest.fixture(autouse=True)
def fleet() -> None:
    ingest_fleet()


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="viewer", password="pw-viewer-1"))
    return client


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="boss", password="pw-boss-1",
                                                is_superuser=True))
    return client


def _figure(html: str, div_id: str) -> list[dict[str, Any]]:
    return traces_of(html, div_id)


def _tile(html: str, tile_id: str) -> str:
    match = re.search(rf'id="{tile_id}">([^<]*)<', html)
    assert match is not None, tile_id
    return match.group(1)


# --------------------------------------------------------------------------- the query

def test_component_lost_time_per_day_and_over_the_range() -> None:
    result = calculate(ComponentQuery("pt2_compiler", WHOLE))
    assert result is not None
    assert [(p.period, p.lost_gpu_s / H, p.wall_gpu_s / H) for p in result.points] == [
        (date(2026, 3, 1), 2.0, 12.0), (date(2026, 3, 2), 4.0, 24.0 + 8.0),
        (date(2026, 3, 3), 2.0, 10.0)]
    assert [p.lost_share_pts for p in result.points] == pytest.approx(
        [100 * 2 / 12, 100 * 4 / 32, 100 * 2 / 10])
    assert result.lost_gpu_hours == pytest.approx(2 + 4 + 2)
    assert result.lost_share_pts == pytest.approx(100 * 8 / (12 + 32 + 10))
    assert result.share_of_fleet_lost_pct == pytest.approx(100 * 8 / (3 + 4 + 2 + 2))
    assert {k: v / H for k, v in result.categories.items()} == {"compile": 8.0}


def test_weekly_points_start_on_monday() -> None:
    result = calculate(ComponentQuery("pt2_compiler", WHOLE, interval="week"))
    assert result is not None
    assert [(p.period, p.lost_gpu_s / H, p.wall_gpu_s / H) for p in result.points] == [
        (date(2026, 2, 23), 2.0, 12.0), (date(2026, 3, 2), 4.0 + 2.0, 32.0 + 10.0)]


def test_top_jobs_and_models_by_the_components_lost_time() -> None:
    pt2 = calculate(ComponentQuery("pt2_compiler", WHOLE))
    assert pt2 is not None
    assert [(j.job, j.lost_gpu_hours) for j in pt2.top_jobs] == [("b", 4.0), ("a", 2.0),
                                                                ("d", 2.0)]
    assert pt2.top_jobs[0].lost_share_pts == pytest.approx(100 * 4 / 24)  # of b's own wall
    assert [(m.model, m.lost_gpu_hours, m.jobs) for m in pt2.top_models] == [
        ("m2", 4.0, 1), ("m1", 2.0, 1), ("m3", 2.0, 1)]
    ckpt = calculate(ComponentQuery("checkpointing", WHOLE))
    assert ckpt is not None
    assert [(j.job, j.lost_gpu_hours) for j in ckpt.top_jobs] == [("c", 2.0), ("a", 1.0)]
    assert [(m.model, m.lost_gpu_hours, m.jobs) for m in ckpt.top_models] == [("m1", 3.0, 2)]
    assert ckpt.share_of_fleet_lost_pct == pytest.approx(100 * 3 / 11)


def test_range_keeps_only_its_days() -> None:
    result = calculate(ComponentQuery("pt2_compiler", DateRange(date(2026, 3, 2),
                                                                date(2026, 3, 2))))
    assert result is not None
    assert result.lost_gpu_hours == 4.0
    assert result.lost_share_pts == pytest.approx(100 * 4 / 32)
    assert result.share_of_fleet_lost_pct == pytest.approx(100 * 4 / (4 + 2))


def test_the_map_is_read_at_query_time() -> None:
    PhaseComponent.objects.filter(phase="compile").update(component="compiler_cache")
    moved = calculate(ComponentQuery("compiler_cache", WHOLE))
    assert moved is not None and moved.lost_gpu_hours == 8.0
    old = calculate(ComponentQuery("pt2_compiler", WHOLE))  # still a Component row
    assert old is not None and old.lost_gpu_hours == 0.0 and old.top_jobs == []


def test_unknown_component_is_none() -> None:
    assert calculate(ComponentQuery("no_such_component", WHOLE)) is None


def test_index_lists_every_known_component() -> None:
    Component.objects.filter(name="checkpointing").update(owner_team="storage-team")
    result = calculate(ComponentsIndexQuery(WHOLE))
    rows = {r.name: r for r in result.components}
    assert [r.name for r in result.components[:2]] == ["pt2_compiler", "checkpointing"]
    assert {"scheduler", "reliability", "unknown", "evaluation"} <= set(rows)
    assert rows["pt2_compiler"].lost_gpu_hours == 8.0
    assert rows["pt2_compiler"].share_of_fleet_lost_pct == pytest.approx(100 * 8 / 11)
    assert rows["checkpointing"].lost_share_pts == pytest.approx(100 * 3 / 54)
    assert rows["checkpointing"].owner_team == "storage-team"
    assert rows["scheduler"].lost_gpu_s == 0.0
    assert result.fleet_lost_gpu_hours == pytest.approx(11.0)


# --------------------------------------------------------------------------- the pages

def test_component_page_shows_numbers_charts_and_top_lists(viewer: Client) -> None:
    response = viewer.get("/components/pt2_compiler/", RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert _tile(html, "component-lost-hours") == f"{2 + 4 + 2:.2f}"
    assert _tile(html, "component-lost-share") == f"{100 * 8 / 54:.2f} pts"
    assert _tile(html, "component-fleet-share") == f"{100 * 8 / 11:.2f}%"
    lost = _figure(html, "component-lost")
    assert lost[0]["x"] == ["2026-03-01", "2026-03-02", "2026-03-03"]
    assert lost[0]["y"] == pytest.approx([2.0, 4.0, 2.0])
    share = _figure(html, "component-share")
    assert share[0]["y"] == pytest.approx([100 * 2 / 12, 100 * 4 / 32, 100 * 2 / 10])
    top = html[html.index('id="top-jobs"'):html.index('id="top-models"')]
    assert re.findall(r'href="/jobs/([^/]+)/"', top) == ["b", "a", "d"]
    models = html[html.index('id="top-models"'):]
    assert re.findall(r"<tr><td>(m\d)</td>", models) == ["m2", "m1", "m3"]


def test_index_page_links_every_component(viewer: Client) -> None:
    response = viewer.get("/components/", RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'href="/components/pt2_compiler/?date_from=2026-02-01&amp;date_to=2026-03-31"' in html
    assert re.search(r"pt2_compiler</a></td>\s*<td>—</td>\s*<td class=\"owners\">—</td>\s*"
                     r"<td class=\"num\">8\.00</td>\s*"
                     rf"<td class=\"num\">{100 * 8 / 11:.2f}%</td>", html)


# --------------------------------------------------------------------------- owners

def _owners_shown(client: Client) -> tuple[str, str]:
    """checkpointing's owners as its page's headline and the index's row show them."""
    detail = client.get("/components/checkpointing/", RANGE).content.decode()
    index = client.get("/components/", RANGE).content.decode()
    headline = re.search(r'id="owners">([^<]*)<', detail)
    row = re.search(r'checkpointing</a></td>\s*<td>[^<]*</td>\s*<td class="owners">([^<]*)<',
                    index)
    assert headline is not None and row is not None
    return headline.group(1), row.group(1)


def _api(client: Client, token: str, path: str) -> dict[str, Any]:
    response = client.get(path, RANGE, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_pages_and_api_name_the_owner_roles_owners(viewer: Client) -> None:
    """Who owns a component is the owner role's answer, the one edits ask: a ComponentOwner
    row of an active user in ``owner``. A row without the role (a viewer's, an admin's, a
    deactivated account's) names nobody; taking the role away removes the owner at once."""
    Component.objects.filter(name="checkpointing").update(owner_team="storage-team")
    ada = User.objects.create_user("ada", first_name="Ada", last_name="Lovelace")
    set_role(ada, "owner", ["checkpointing", "pt2_compiler"])
    bob = User.objects.create_user("bob")
    set_role(bob, "owner", ["checkpointing"])
    gone = User.objects.create_user("gone", is_active=False)
    set_role(gone, "owner", ["checkpointing"])
    for name, role in (("carol", "viewer"), ("root", "admin")):
        user = User.objects.create_user(name)
        set_role(user, role)  # type: ignore[arg-type]
        ComponentOwner.objects.create(user=user, component="checkpointing")
    token = issue_token(User.objects.create_user("reader"), "owners test")

    def api_owners() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        one = _api(viewer, token, "/api/v1/components/checkpointing")
        rows = {r["name"]: r for r in _api(viewer, token, "/api/v1/components")["components"]}
        assert rows["checkpointing"]["owner_team"] == one["owner_team"] == "storage-team"
        assert rows["scheduler"]["owners"] == []
        return one["owners"], rows["checkpointing"]["owners"]

    assert _owners_shown(viewer) == ("Ada Lovelace (ada), bob", "Ada Lovelace (ada), bob")
    both = [{"username": "ada", "name": "Ada Lovelace"}, {"username": "bob", "name": ""}]
    assert api_owners() == (both, both)
    csv = viewer.get("/components/", {**RANGE, "format": "csv", "table": "components"})
    rows = {line.split(",")[0]: line for line in csv.content.decode().splitlines()}
    assert rows["component"].endswith(",rollouts,owners")  # a new last column: none moved
    assert rows["checkpointing"].startswith("checkpointing,storage-team,")
    assert rows["checkpointing"].endswith(',"ada, bob"')

    set_role(bob, "viewer")  # ett_login bob --role viewer, or SSO taking the claim away
    assert _owners_shown(viewer) == ("Ada Lovelace (ada)", "Ada Lovelace (ada)")
    ada.groups.remove(Group.objects.get(name="owner"))  # the admin's way: rows stay
    assert ComponentOwner.objects.filter(user=ada).count() == 2
    assert _owners_shown(viewer) == ("none", "—")
    assert api_owners() == ([], [])


def test_fleet_table_links_component_pages(viewer: Client) -> None:
    html = viewer.get("/fleet/", RANGE).content.decode()
    table = html[html.index('id="lost-table"'):]
    assert ('href="/components/pt2_compiler/?date_from=2026-02-01&amp;date_to=2026-03-31'
            '&amp;interval=day"') in table


def test_rollouts_table_shows_the_measured_change(viewer: Client) -> None:
    # Fleet-wide, Mar 2: before = a (Mar 1) 9/12 = 75%, after = d (Mar 3) 8/10 = 80%.
    rollout = Rollout.objects.create(name="fast compile", component="pt2_compiler",
                                     at=datetime(2026, 3, 2, 9, tzinfo=UTC), scope={})
    impact = calculate(ImpactQuery(rollout.pk))
    assert impact is not None and impact.treated.change_pts == pytest.approx(80.0 - 75.0)
    html = viewer.get("/components/pt2_compiler/", RANGE).content.decode()
    table = html[html.index('id="rollouts"'):]
    assert f'href="/rollouts/{rollout.pk}/"' in table
    assert "+5.00 pts" in table
    assert "too few jobs" in table  # one job per window: no interval
    assert f'class="verdict {impact.verdict}"' in table
    assert _tile(html, "component-rollouts") == "1"
    lanes = [t for t in _figure(html, "component-lost") if t.get("meta") == "rollouts"]
    assert [t["customdata"] for t in lanes] == [[f"/rollouts/{rollout.pk}/"]]


def test_user_text_is_escaped_on_the_page(viewer: Client) -> None:
    Rollout.objects.create(name="<script>alert(1)</script>", component="pt2_compiler",
                           at=datetime(2026, 3, 2, 9, tzinfo=UTC),
                           scope={"teams": ["<script>alert(2)</script>"]},
                           link="javascript:alert(3)")
    html = viewer.get("/components/pt2_compiler/", RANGE).content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the table cell
    assert "teams &lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "javascript:" not in html
    hover = next(t for t in _figure(html, "component-lost")
                 if t.get("meta") == "rollouts")["hovertext"][0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hover and "<script" not in hover


def test_staff_edit_the_owner_team(staff: Client) -> None:
    response = staff.post("/components/pt2_compiler/?date_from=2026-03-01",
                          {"owner_team": "  compiler-infra  "})
    assert response.status_code == 302
    assert response["Location"] == "/components/pt2_compiler/?date_from=2026-03-01"
    assert Component.objects.get(name="pt2_compiler").owner_team == "compiler-infra"
    html = staff.get("/components/pt2_compiler/").content.decode()
    assert _tile(html, "owner-team") == "compiler-infra"
    assert 'id="owner-form"' in html


def test_owner_team_of_a_component_only_in_the_map_creates_its_row(staff: Client) -> None:
    PhaseComponent.objects.filter(phase="compile").update(component="compiler_cache")
    assert not Component.objects.filter(name="compiler_cache").exists()
    assert staff.post("/components/compiler_cache/", {"owner_team": "cc"}).status_code == 302
    assert Component.objects.get(name="compiler_cache").owner_team == "cc"


def test_owner_team_longer_than_200_characters_is_a_400(staff: Client) -> None:
    response = staff.post("/components/pt2_compiler/", {"owner_team": "x" * 201})
    assert response.status_code == 400
    assert "owner_team" in response.content.decode()
    assert Component.objects.get(name="pt2_compiler").owner_team == ""


def test_non_staff_cannot_edit_the_owner_team(viewer: Client) -> None:
    assert viewer.post("/components/pt2_compiler/", {"owner_team": "me"}).status_code == 403
    assert Component.objects.get(name="pt2_compiler").owner_team == ""
    html = viewer.get("/components/pt2_compiler/").content.decode()
    assert 'id="owner-form"' not in html and "its owners and admins can change it" in html


def test_owner_team_post_needs_the_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user(username="s", password="pw-s-1", is_superuser=True))
    assert client.post("/components/pt2_compiler/", {"owner_team": "x"}).status_code == 403
    page = client.get("/components/pt2_compiler/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    response = client.post("/components/pt2_compiler/",
                           {"owner_team": "x", "csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302


@pytest.mark.parametrize("method", ["get", "post"])
def test_unknown_component_is_a_404(staff: Client, method: str) -> None:
    response = getattr(staff, method)("/components/no_such_component/")
    assert response.status_code == 404
    assert staff.get("/components/a/b/").status_code == 404  # a slash is not a 500 either


@pytest.mark.parametrize(("url", "params", "reason"), [
    ("/components/pt2_compiler/", {"interval": "month"}, "interval: Select a valid choice"),
    ("/components/pt2_compiler/", {"date_from": "2026-13-01"}, "date_from: must be a day written"),
    ("/components/pt2_compiler/", {"date_from": "2026-03-05", "date_to": "2026-03-01"},
     "date_from 2026-03-05 is after"),
    ("/components/", {"date_to": "yesterday"}, "date_to: must be a day written YYYY-MM-DD"),
])
def test_bad_parameters_are_a_400_naming_them(viewer: Client, url: str,
                                              params: dict[str, str], reason: str) -> None:
    response = viewer.get(url, params)
    assert response.status_code == 400
    assert reason in response.content.decode()


def test_pages_need_a_login(client: Client) -> None:
    for url in ("/components/", "/components/pt2_compiler/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_page_without_data_in_the_range_renders(viewer: Client) -> None:
    response = viewer.get("/components/pt2_compiler/", {"date_from": "2025-01-01",
                                                        "date_to": "2025-01-31"})
    assert response.status_code == 200
    assert b"No rollups in this range." in response.content


def test_rollouts_outside_the_range_are_counted_with_a_link_that_holds_them(
        viewer: Client) -> None:
    """A component whose rollouts all lie before the range says how many, not just "no
    rollouts", and links to the same page over a range that holds them."""
    for day in (3, 10):
        Rollout.objects.create(name=f"old {day}", component="checkpointing", scope={},
                               at=datetime(2025, 11, day, 12, tzinfo=UTC))
    html = viewer.get("/components/checkpointing/", {**RANGE, "team": "ads"}).content.decode()
    note = html[html.index('id="rollouts-outside"'):]
    note = " ".join(note[:note.index("</p>")].split())
    assert "2 rollouts of checkpointing are before this range" in note
    assert "its rollouts run from 2025-11-03 to 2025-11-10" in note
    link = re.search(r'href="\?([^"]+)"', note)
    assert link is not None
    query = link.group(1).replace("&amp;", "&")
    assert "date_from=2025-11-03" in query and "date_to=2026-03-31" in query and \
        "team=ads" in query
    shown = viewer.get(f"/components/checkpointing/?{query}")
    assert shown.status_code == 200
    assert len(shown.context["c"].markers) == 2 and "rollouts-outside" not in \
        shown.content.decode()
    api = viewer.get("/api/v1/components/checkpointing", RANGE).json()
    assert api["rollouts_outside_range"] == {"before": 2, "after": 0, "first": "2025-11-03",
                                             "last": "2025-11-10"}


def test_the_index_draws_each_components_lost_share_per_period(viewer: Client) -> None:
    """The lost-share chart above the table: each losing component's lost GPU-seconds as
    points of each period's wall time, largest loser first; the API carries the same."""
    html = viewer.get("/components/", {**RANGE, "interval": "week"}).content.decode()
    traces = _figure(html, "components-share")
    body = viewer.get("/api/v1/components", {**RANGE, "interval": "week"}).json()
    losers = [c["name"] for c in body["components"] if c["lost_gpu_s"] > 0]
    assert [t["name"] for t in traces] == losers[:8] and traces
    assert list(body["lost_share_pts"]) == losers
    result = calculate(ComponentsIndexQuery(WHOLE, interval="week"))
    for trace in traces:
        assert trace["y"] == body["lost_share_pts"][trace["name"]]
    assert body["periods"] == [p.isoformat() for p in result.periods]
    # Shares of wall time, per period: weighted by the periods' wall, they give the totals.
    walls = [p.wall_gpu_s for p in calculate(TrendQuery(WHOLE, interval="week")).points]
    for row in result.components:
        if row.lost_gpu_s:
            shares = result.lost_share_pts[row.name]
            lost = sum(s / 100 * w for s, w in zip(shares, walls, strict=True))
            assert lost == pytest.approx(row.lost_gpu_s)


def test_the_index_says_its_interval(viewer: Client) -> None:
    html = viewer.get("/components/", {**RANGE, "interval": "week"}).content.decode()
    assert "(UTC days), per week, of all jobs" in " ".join(html.split())
    assert "Lost share by component, per week" in html
