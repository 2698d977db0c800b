"""Every write checked on the server: viewers are refused everywhere, owners act on their
own components only, admins on everything; CSRF on session writes; the CSP header.

The viewer's walk requests every URL Django knows with every unsafe method, so a write
view added later without a check fails here the day it lands.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import get_resolver

from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token
from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS
from ettweb.components.models import Component, PhaseMove
from ettweb.queries.base import phase_components
from ettweb.rollouts.models import Rollout
from ettweb.rollups.models import PhaseComponent
from tests.ettweb.test_security import _leaves, concrete_path

pytestmark = pytest.mark.django_db

UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
#: What a viewer may still change, by URL name: their own things, never shared data.
PERSONAL = {
    "login": "logging in (a form post)",
    "admin:login": "the admin's log-in form (a viewer's log-in is refused there)",
    "logout": "logging out",
    "password_change": "their own password",
    "reports:settings": "their own weekly e-mail settings",
    "reports:unsubscribe": "the signed link in a mail (no login; a bogus token is a 400)",
    "favicon": "a redirect to the static icon for every method",
    "api-v1:openapi-json": "django-ninja's schema: the same read-only document to any method",
    "api-v1:openapi-view": "django-ninja's docs page: the same read-only page to any method",
    "api-v1:api-root": "django-ninja's placeholder for the API's base path: 404 for everyone",
}
FORM = {"name": "faster compile", "component": "pt2_compiler", "at": "2026-03-10T12:00",
        "teams": "ads", "models": "", "clusters": "", "job_pattern": "", "notes": "",
        "link": ""}
API_ROLLOUT = {"name": "async ckpt", "component": "checkpointing",
               "at": "2026-10-12T09:30:00Z", "scope": {}}


def _user(name: str, role: str, *components: str) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-1")
    set_role(user, role, components)  # type: ignore[arg-type]
    return user


def _client(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def rollouts() -> dict[str, Rollout]:
    at = datetime(2026, 3, 10, 12, tzinfo=UTC)
    return {name: Rollout.objects.create(name=f"{name} change", component=name, at=at)
            for name in ("pt2_compiler", "checkpointing")}


@pytest.fixture
def owner() -> Client:
    return _client(_user("olga", "owner", "pt2_compiler"))


def _reason(response: Any) -> str:
    found = re.search(r'<p id="reason">([^<]*)</p>', response.content.decode())
    return found.group(1) if found else ""


# --------------------------------------------------------------------------- viewers

@pytest.mark.slow
def test_a_viewer_is_refused_every_write_everywhere() -> None:
    """Path parameters get the walker's first sample, ``1``: rollout 1 and component ``1``
    exist, so a refusal is the role's, not a 404 for a missing target."""
    Rollout.objects.create(pk=1, name="one", component="pt2_compiler",
                           at=datetime(2026, 3, 10, tzinfo=UTC))
    Component.objects.create(name="1")
    viewer = _client(_user("vic", "viewer"))
    answered: list[str] = []
    refused_with_reason = 0
    seen: set[str] = set()
    for leaf in _leaves(get_resolver().url_patterns):
        if leaf.regex in seen:  # django-ninja: one pattern per operation, the first serves
            continue
        seen.add(leaf.regex)
        if leaf.name in PERSONAL:  # not requested: logging out would end the walk's login
            continue
        url = concrete_path(leaf)
        for method in UNSAFE:
            response = viewer.generic(method, url)
            status = response.status_code
            if status in (401, 405):
                continue
            if status == 403:
                refused_with_reason += bool(_reason(response) or "error" in response.get(
                    "Content-Type", "") or b'"error"' in response.content)
                continue
            answered.append(f"{method} {url} ({leaf.name}): {status}")
    assert answered == [], "\n".join(answered)
    assert refused_with_reason > 50  # the admin's pages, the dashboard's edits, the API
    assert list(Rollout.objects.values_list("name", flat=True)) == ["one"]
    assert phase_components() == DEFAULT_PHASE_COMPONENTS


@pytest.mark.parametrize(("method", "path", "data"), [
    ("post", "/rollouts/new/", FORM),
    ("get", "/rollouts/new/", None),
    ("post", "/rollouts/{pt2_compiler}/edit/", FORM),
    ("get", "/rollouts/{pt2_compiler}/edit/", None),
    ("post", "/components/pt2_compiler/", {"owner_team": "mine"}),
    ("post", "/components/pt2_compiler/phases/", {"category": "compile",
                                                   "component": "scheduler"}),
    ("get", "/admin/", None),
    ("get", "/reports/preview/?user=olga", None),
])
def test_a_viewers_write_is_a_403_that_says_why(rollouts: dict[str, Rollout], method: str,
                                                path: str, data: Any) -> None:
    _user("olga", "owner", "pt2_compiler")
    viewer = _client(_user("vic", "viewer"))
    url = path.format(**{name: r.pk for name, r in rollouts.items()})
    response = getattr(viewer, method)(url, data) if data else getattr(viewer, method)(url)
    assert response.status_code == 403
    assert _reason(response).startswith("a viewer may not ")
    assert "docs/how-to/manage-access.md: Roles" in _reason(response)
    assert Rollout.objects.get(pk=rollouts["pt2_compiler"].pk).name == "pt2_compiler change"
    assert not Component.objects.filter(owner_team="mine").exists()
    assert phase_components()["compile"] == "pt2_compiler"


def test_a_viewers_token_cannot_record_a_rollout(client: Client) -> None:
    token = issue_token(_user("vic", "viewer"), "ci")
    response = client.post("/api/v1/rollouts", json.dumps(API_ROLLOUT),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 403
    assert response.json()["error"].startswith("a viewer may not record rollouts")
    assert not Rollout.objects.exists()
    # ... and reads as everyone does.
    listed = client.get("/api/v1/rollouts", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert listed.status_code == 200


def test_a_viewer_sees_no_edit_link(rollouts: dict[str, Rollout]) -> None:
    viewer = _client(_user("vic", "viewer"))
    listing = viewer.get("/rollouts/").content.decode()
    assert 'id="new-rollout"' not in listing and "/edit/" not in listing
    detail = viewer.get(f"/rollouts/{rollouts['pt2_compiler'].pk}/").content.decode()
    assert "/edit/" not in detail and 'href="/admin/"' not in detail
    component = viewer.get("/components/pt2_compiler/").content.decode()
    assert 'id="owner-form"' not in component and 'id="phase-map-link"' in component
    phases = viewer.get("/components/pt2_compiler/phases/").content.decode()
    assert 'name="category"' not in phases and "<td>compile</td>" in phases


# --------------------------------------------------------------------------- owners

def test_an_owner_records_and_edits_rollouts_of_their_component(
        owner: Client, rollouts: dict[str, Rollout]) -> None:
    created = owner.post("/rollouts/new/", FORM)
    assert created.status_code == 302
    mine = rollouts["pt2_compiler"]
    edited = owner.post(f"/rollouts/{mine.pk}/edit/", {**FORM, "name": "renamed"})
    assert edited.status_code == 302
    assert Rollout.objects.get(pk=mine.pk).name == "renamed"
    page = owner.get(f"/rollouts/{mine.pk}/").content.decode()
    assert f"/rollouts/{mine.pk}/edit/" in page
    listing = owner.get("/rollouts/").content.decode()
    assert 'id="new-rollout"' in listing
    assert f"/rollouts/{mine.pk}/edit/" in listing
    assert f"/rollouts/{rollouts['checkpointing'].pk}/edit/" not in listing


def test_an_owner_cannot_touch_another_components_rollouts(
        owner: Client, rollouts: dict[str, Rollout]) -> None:
    theirs, mine = rollouts["checkpointing"], rollouts["pt2_compiler"]
    for response in (owner.get(f"/rollouts/{theirs.pk}/edit/"),
                     owner.post(f"/rollouts/{theirs.pk}/edit/",
                                {**FORM, "component": "checkpointing"}),
                     owner.post("/rollouts/new/", {**FORM, "component": "checkpointing"})):
        assert response.status_code == 403
        assert _reason(response).startswith("you own pt2_compiler, but only a component")
    moved = owner.post(f"/rollouts/{mine.pk}/edit/", {**FORM, "component": "checkpointing"})
    assert moved.status_code == 403
    assert "move a rollout to checkpointing" in _reason(moved)
    assert Rollout.objects.get(pk=mine.pk).component == "pt2_compiler"
    assert Rollout.objects.count() == 2
    assert f"/rollouts/{theirs.pk}/edit/" not in owner.get(
        f"/rollouts/{theirs.pk}/").content.decode()


def test_an_owner_edits_their_owner_team_only(owner: Client) -> None:
    assert owner.post("/components/pt2_compiler/", {"owner_team": "compilers"}).status_code \
        == 302
    assert Component.objects.get(name="pt2_compiler").owner_team == "compilers"
    refused = owner.post("/components/checkpointing/", {"owner_team": "compilers"})
    assert refused.status_code == 403
    assert "change the owner team of checkpointing" in _reason(refused)
    assert 'id="owner-form"' in owner.get("/components/pt2_compiler/").content.decode()
    assert 'id="owner-form"' not in owner.get("/components/checkpointing/").content.decode()


def test_an_owner_moves_a_category_only_between_components_they_own() -> None:
    """Moving a category recharges its history to the other component, so an owner of
    pt2_compiler alone may not hand ``compile`` to scheduler (the rollout editor's rule);
    owning both, they may, and the move is recorded and shown on both pages."""
    PhaseComponent.objects.all().delete()  # the defaults apply; the first edit stores them
    olga = _user("olga", "owner", "pt2_compiler")
    only_theirs = _client(olga)
    page = only_theirs.get("/components/pt2_compiler/phases/").content.decode()
    assert '<input type="hidden" name="category" value="compile">' in page
    assert '<option value="scheduler"' not in page  # not offered
    refused = only_theirs.post("/components/pt2_compiler/phases/",
                               {"category": "compile", "component": "scheduler"})
    assert refused.status_code == 403
    assert "move compile to scheduler" in _reason(refused)
    assert phase_components()["compile"] == "pt2_compiler"
    assert not PhaseMove.objects.exists()

    both = _client(_user("omar", "owner", "pt2_compiler", "scheduler"))
    response = both.post("/components/pt2_compiler/phases/",
                         {"category": "compile", "component": "scheduler"})
    assert response.status_code == 302
    assert response["Location"] == "/components/pt2_compiler/phases/?moved=compile"
    assert phase_components() == {**DEFAULT_PHASE_COMPONENTS, "compile": "scheduler"}
    move = PhaseMove.objects.get()
    assert (move.category, move.from_component, move.to_component, move.moved_by) == (
        "compile", "pt2_compiler", "scheduler", User.objects.get(username="omar"))
    for page_of in ("pt2_compiler", "scheduler"):
        shown = both.get(f"/components/{page_of}/phases/").content.decode()
        assert re.search(r"<td>compile</td>\s*<td>pt2_compiler</td><td>scheduler</td>\s*"
                         r"<td>omar</td>", shown), page_of
    assert "<td>compile</td>" in both.get("/components/scheduler/phases/").content.decode()


def test_an_admin_moves_any_category_anywhere(client: Client) -> None:
    admin = _client(_user("ada", "admin"))
    assert admin.post("/components/checkpointing/phases/",
                      {"category": "checkpoint_save", "component": "scheduler"}).status_code == 302
    assert phase_components()["checkpoint_save"] == "scheduler"
    assert PhaseMove.objects.get().moved_by == User.objects.get(username="ada")


def test_an_owner_cannot_move_another_components_categories(owner: Client) -> None:
    refused = owner.post("/components/checkpointing/phases/",
                         {"category": "checkpoint_save", "component": "pt2_compiler"})
    assert refused.status_code == 403
    assert "change the phase map of checkpointing" in _reason(refused)
    # Through their own page either: the category is not theirs to move.
    sneaked = owner.post("/components/pt2_compiler/phases/",
                         {"category": "checkpoint_save", "component": "pt2_compiler"})
    assert sneaked.status_code == 400
    assert sneaked.content.decode() == ("bad phase map change: category: checkpoint_save "
                                        "belongs to checkpointing, not pt2_compiler")
    assert phase_components()["checkpoint_save"] == "checkpointing"
    page = owner.get("/components/checkpointing/phases/").content.decode()
    assert 'name="category"' not in page and "<td>checkpoint_save</td>" in page


@pytest.mark.parametrize(("data", "reason"), [
    ({"category": "nope", "component": "scheduler"}, "category: unknown category 'nope'"),
    ({"category": "compile", "component": "nowhere"}, "component: Select a valid choice."),
    ({"component": "scheduler"}, "category: This field is required."),
])
def test_a_bad_phase_map_change_is_a_400_naming_the_field(owner: Client, data: dict[str, str],
                                                          reason: str) -> None:
    response = owner.post("/components/pt2_compiler/phases/", data)
    assert response.status_code == 400
    assert reason in response.content.decode()


def test_an_unknown_components_phase_map_is_a_404(owner: Client) -> None:
    assert owner.get("/components/no_such/phases/").status_code == 404


def test_an_owners_token_records_rollouts_of_their_component_only(client: Client) -> None:
    token = issue_token(_user("ci", "owner", "checkpointing"), "ci")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    ok = client.post("/api/v1/rollouts", json.dumps(API_ROLLOUT),
                     content_type="application/json", **headers)
    assert ok.status_code == 201, ok.content
    other = client.post("/api/v1/rollouts", json.dumps({**API_ROLLOUT, "component": "scheduler"}),
                        content_type="application/json", **headers)
    assert other.status_code == 403
    assert other.json() == {"error": "you own checkpointing, but only a component's owners "
                                     "and admins may record a rollout of scheduler: an admin "
                                     "gives roles (docs/how-to/manage-access.md: Roles)"}
    assert list(Rollout.objects.values_list("component", flat=True)) == ["checkpointing"]


def test_owners_and_viewers_are_refused_the_admin_with_a_reason(owner: Client) -> None:
    """Each role is told, in a sentence, that the admin is for admins alone (issue 40, 4c:
    an owner read "use the admin is for that component's owners and admins", a viewer that
    owners may use it)."""
    viewer = _client(_user("vic", "viewer"))
    said = {
        owner: "you own pt2_compiler, but only admins may use the admin site: an admin gives "
               "roles (docs/how-to/manage-access.md: Roles)",
        viewer: "a viewer may not use the admin site: only admins may, and an admin gives "
                "roles (docs/how-to/manage-access.md: Roles)"}
    for client, reason in said.items():
        for path in ("/admin/", "/admin/rollups/phasecomponent/", "/admin/auth/user/"):
            response = client.get(path)
            assert response.status_code == 403, path
            assert html.unescape(_reason(response)) == reason, path
    assert 'href="/admin/"' not in owner.get("/rollouts/").content.decode()


def test_only_admins_preview_another_users_report_and_owners_are_told_so(
        owner: Client) -> None:
    response = owner.get("/reports/preview/?user=olga")
    assert response.status_code == 403
    assert html.unescape(_reason(response)) == (
        "you own pt2_compiler, but only admins may preview another user's report: an admin "
        "gives roles (docs/how-to/manage-access.md: Roles)")


# --------------------------------------------------------------------------- admins

def test_an_admin_by_group_does_everything(rollouts: dict[str, Rollout]) -> None:
    user = User.objects.create_user("ada", password="pw-ada-1")
    user.groups.add(Group.objects.get_or_create(name="admin")[0])  # not staff, not superuser
    admin = _client(user)
    assert admin.post("/rollouts/new/", {**FORM, "component": "scheduler"}).status_code == 302
    theirs = rollouts["checkpointing"]
    assert admin.post(f"/rollouts/{theirs.pk}/edit/", {**FORM, "component": "evaluation"}
                      ).status_code == 302
    assert admin.post("/components/checkpointing/", {"owner_team": "x"}).status_code == 302
    assert admin.post("/components/checkpointing/phases/",
                      {"category": "checkpoint_load", "component": "reliability"}
                      ).status_code == 302
    assert phase_components()["checkpoint_load"] == "reliability"
    assert admin.get("/admin/").status_code == 200
    changelist = admin.get("/admin/rollups/phasecomponent/")
    assert changelist.status_code == 200
    row = PhaseComponent.objects.get(phase="eval")
    assert admin.post(f"/admin/rollups/phasecomponent/{row.pk}/change/",
                      {"phase": "eval", "component": "trainer_init"}).status_code == 302
    assert PhaseComponent.objects.get(phase="eval").component == "trainer_init"
    assert admin.get("/reports/preview/?user=ada").status_code == 200
    assert 'href="/admin/"' in admin.get("/rollouts/").content.decode()


def test_an_admin_by_group_logs_in_to_the_admin_and_a_viewer_cannot() -> None:
    user = User.objects.create_user("ada", password="pw-ada-1")
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    _user("vic", "viewer")
    client = Client()
    form = {"username": "ada", "password": "pw-ada-1", "next": "/admin/"}
    assert client.post("/admin/login/", form).status_code == 302
    refused = Client().post("/admin/login/", {**form, "username": "vic",
                                               "password": "pw-vic-1"})
    assert refused.status_code == 200 and "staff account" in refused.content.decode()


# --------------------------------------------------------------------------- CSRF

def _csrf(client: Client) -> str:
    """The token a page's forms carry (its cookie is set on the client)."""
    page = client.get("/components/pt2_compiler/phases/").content.decode()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_the_browser_session_reads_the_api_and_writes_only_with_csrf() -> None:
    browser = _client(_user("olga", "owner", "checkpointing"), enforce_csrf_checks=True)
    assert browser.get("/api/v1/rollouts").status_code == 200
    body = json.dumps(API_ROLLOUT)
    forged = browser.post("/api/v1/rollouts", body, content_type="application/json")
    assert forged.status_code == 403
    assert forged.json()["error"].startswith("CSRF: a logged-in session's POST needs")
    assert not Rollout.objects.exists()
    sent = browser.post("/api/v1/rollouts", body, content_type="application/json",
                        HTTP_X_CSRFTOKEN=_csrf(browser))
    assert sent.status_code == 201, sent.content
    assert sent.json()["created_by"] == "olga"


def test_a_token_needs_no_csrf_and_a_bad_one_is_still_a_401() -> None:
    client = Client(enforce_csrf_checks=True)
    token = issue_token(_user("ci", "owner", "checkpointing"), "ci")
    ok = client.post("/api/v1/rollouts", json.dumps(API_ROLLOUT),
                     content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert ok.status_code == 201
    bad = client.post("/api/v1/rollouts", json.dumps(API_ROLLOUT),
                      content_type="application/json", HTTP_AUTHORIZATION="Bearer ett_nope")
    assert bad.status_code == 401
    assert "no logged-in session" in bad.json()["error"]


def test_page_writes_need_the_csrf_token(rollouts: dict[str, Rollout]) -> None:
    owner = _client(_user("olga", "owner", "pt2_compiler", "scheduler"),
                    enforce_csrf_checks=True)
    move = {"category": "compile", "component": "scheduler"}
    assert owner.post("/components/pt2_compiler/phases/", move).status_code == 403
    assert owner.post("/rollouts/new/", FORM).status_code == 403
    assert phase_components()["compile"] == "pt2_compiler"
    token = _csrf(owner)
    assert owner.post("/components/pt2_compiler/phases/",
                      {**move, "csrfmiddlewaretoken": token}).status_code == 302
    assert phase_components()["compile"] == "scheduler"


# --------------------------------------------------------------------------- CSP

POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; "
          "base-uri 'self'; form-action 'self'; frame-ancestors 'none'")


def _directives(header: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


@pytest.mark.parametrize("path", ["/", "/fleet/", "/rollouts/", "/components/pt2_compiler/",
                                  "/components/pt2_compiler/phases/", "/admin/",
                                  "/rollouts/new/", "/accounts/login/", "/api/v1/rollouts"])
def test_every_page_carries_the_policy(path: str) -> None:
    client = _client(_user("vic", "viewer"))
    response = client.get(path)
    assert response.status_code in (200, 403)  # a refusal page carries it too
    assert _directives(response["Content-Security-Policy"]) == _directives(POLICY)


def test_the_policy_allows_no_inline_or_eval_script() -> None:
    header = Client().get("/accounts/login/")["Content-Security-Policy"]
    script = _directives(header)["script-src"]
    assert script == "'self'"
    assert "unsafe" not in script and "nonce" not in script


def test_pages_hold_no_inline_script(rollouts: dict[str, Rollout]) -> None:
    """Every <script> of a page is a file of ours or a JSON data block."""
    client = _client(_user("boss", "admin"))
    for path in ("/", "/fleet/", "/components/pt2_compiler/", "/rollouts/",
                 f"/rollouts/{rollouts['pt2_compiler'].pk}/", "/reports/preview/",
                 "/components/pt2_compiler/phases/"):
        html = client.get(path).content.decode()
        for tag in re.findall(r"<script[^>]*>", html):
            assert 'src="/static/' in tag or 'type="application/json"' in tag, (path, tag)
        assert not re.search(r"\son[a-z]+=", html), path  # no inline event handler
