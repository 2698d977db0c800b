"""Refusals a person reads (issue 28): a browser gets a page in the site's layout that names
each bad parameter and what it takes, with a way back; a program keeps the one line of text;
a missing page is the site's own 404, never Django's debug page; a form shows every problem
at once."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token

pytestmark = pytest.mark.django_db
HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def test_a_browser_gets_the_refusal_as_a_page_naming_each_problem(viewer: Client) -> None:
    response = viewer.get("/fleet/", {"gpus": "7", "date_to": "9999-12-31"}, **HTML)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert 'class="topbar"' in html and "Log out viewer" in html  # the site's layout
    assert "<li>gpus: Select a valid choice. 7 is not one of the available choices. " \
           "(one of 1, 2-8, 9-64, 65-512, 513+)</li>" in html
    assert "<li>date_to: must be a day from 1900-01-01 to 9999-12-30, not 9999-12-31</li>" in html
    assert '<a href="/fleet/" id="back">' in html


def test_a_program_keeps_the_line_of_text(viewer: Client) -> None:
    response = viewer.get("/fleet/", {"gpus": "7"}, HTTP_ACCEPT="*/*")
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode().startswith("bad parameters: gpus: Select a valid choice")


@pytest.mark.parametrize("path", ["/rollouts/?date_from=9999-12-31", "/?date_from=9999-12-31",
                                  "/?format=xml", "/changes/?date_to=0001-01-01"])
def test_every_page_refuses_days_it_cannot_show_and_names_them(viewer: Client,
                                                               path: str) -> None:
    response = viewer.get(path)
    assert response.status_code == 400
    reason = response.content.decode()
    assert reason.startswith(f"bad parameters: {path.split('?')[1].split('=')[0]}: "), reason


def test_a_missing_page_is_the_sites_own_404(viewer: Client) -> None:
    html = viewer.get("/jobs/no-such-job/", **HTML).content.decode()
    assert "No events for job &#x27;no-such-job&#x27;" in html and 'class="topbar"' in html
    nowhere = viewer.get("/no/such/page/", **HTML)
    assert nowhere.status_code == 404
    text = nowhere.content.decode()
    assert "There is no page here." in text and "Resolver404" not in text
    assert "URLconf" not in text  # never the debug page that lists every URL pattern


def test_the_rollout_form_shows_every_problem_at_once(client: Client) -> None:
    owner = User.objects.create_user("owner")
    set_role(owner, "admin")
    client.force_login(owner)
    response = client.post("/rollouts/new/", {
        "name": "", "component": "checkpointing", "at": "soon", "teams": ",",
        "link": "javascript:alert(1)"})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert set(errors) == {"name", "at", "teams", "link"}, errors
    assert "link: must be an http:// or https:// URL" in errors["link"]


def test_the_api_names_every_bad_rollout_field(client: Client) -> None:
    admin = User.objects.create_user("admin")
    set_role(admin, "admin")
    response = client.post("/api/v1/rollouts", {
        "name": "", "component": "ckpt", "at": "2026-10-12T09:30:00Z", "scope": {}},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(admin, 'test')}")
    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith(
        "name: must not be empty; component: unknown component 'ckpt'")
