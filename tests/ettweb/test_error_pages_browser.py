"""Real Chromium (issue 28): a bad parameter, a missing page and a form with several mistakes
as a person meets them: pages in the site's layout that say what is wrong, all of it at once,
and how to get back."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser
from pytest_django.live_server_helper import LiveServer

from ettweb.access.roles import set_role
from tests.ettweb.reports.test_report_browser import log_in, shoot, watched

PASSWORD = "pw-errors-1"


@pytest.fixture
def admin(transactional_db: None) -> None:
    set_role(User.objects.create_user("admin", password=PASSWORD), "admin")


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_errors_are_pages_that_help(admin: None, live_server: LiveServer, browser: Browser,
                                    tmp_path: Path) -> None:
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    log_in(page, live_server, "/", "admin", PASSWORD)
    page.wait_for_url("**/")

    response = page.goto(f"{live_server.url}/fleet/?gpus=7&teem=ads")
    assert response is not None and response.status == 400
    assert page.is_visible("header.topbar")
    items = page.locator("#problems li").all_text_contents()
    assert items == ["teem: unknown parameter (this page takes cluster, compare, date_from, "
                     "date_to, format, gpus, group_by, interval, model, table, team)"]
    shoot(page, tmp_path, "error-400.png")
    page.click("#back")
    page.wait_for_url("**/fleet/")

    response = page.goto(f"{live_server.url}/jobs/nobody/")
    assert response is not None and response.status == 404
    assert page.text_content("#reason") == "No events for job 'nobody'"
    assert "URLconf" not in page.content()
    shoot(page, tmp_path, "error-404.png")

    page.goto(f"{live_server.url}/rollouts/new/")
    page.fill("#id_link", "javascript:alert(1)")
    page.fill("#id_teams", ",")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_load_state()
    errors = page.locator("#rollout-form p.error").all_text_contents()
    assert len(errors) >= 4, errors  # name, at, teams and link: all of them at once
    assert any("link: must be an http://" in e for e in errors)
    shoot(page, tmp_path, "error-form.png")
    assert [p for p in problems if "400" not in p and "404" not in p] == []
    assert external == []


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_at_a_phones_width_every_nav_link_is_on_screen(admin: None, live_server: LiveServer,
                                                      browser: Browser, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 380, "height": 800})
    log_in(page, live_server, "/", "admin", PASSWORD)
    page.wait_for_url("**/")
    links = page.locator("header.topbar nav a")
    assert links.count() >= 8
    for i in range(links.count()):
        box = links.nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 380, \
            links.nth(i).inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 380
    shoot(page, tmp_path, "phone-jobs.png")
