"""Real Chromium on the report pages: the preview's iframe shows the e-mail with its chart
loaded, the settings form shows the defaults and saves, and the console stays clean.

README screenshots: ``ETT_SCREENSHOT_DIR=/some/dir pytest -m browser
tests/ettweb/reports/test_report_browser.py`` also writes ``preview.png``, ``settings.png``
and ``unsubscribe.png`` there (full page), previewing the last complete week of a simulated
fleet (``simulate_fleet``'s defaults, about 10 s) instead of the small hand-made one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, ConsoleMessage, Page
from pytest_django.live_server_helper import LiveServer

from ettweb.access.roles import set_role
from ettweb.components.models import Component
from ettweb.queries import IsoWeek, WeeklyReportQuery, calculate
from ettweb.reports.models import Subscription
from ettweb.reports.tokens import make_token
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

PASSWORD = "pw-reports-1"
SHOTS = os.environ.get("ETT_SCREENSHOT_DIR", "")


@dataclass(frozen=True)
class Scene:
    week: IsoWeek
    subject: str  # the owner's subject line for that week
    unsubscribe_url: str  # someone else's link from their mail


@pytest.fixture
def scene(transactional_db: None) -> Scene:
    """A week with data, an owner of two components with a login, and another subscriber's
    unsubscribe link (all ORM work here: none once the browser runs)."""
    if SHOTS:
        call_command("simulate_fleet", "--no-progress")
        shown = IsoWeek.last_complete(timezone.now())
    else:
        events: list[dict[str, Any]] = []
        events += day_job("prev-a", 3, 2, "ads", ("compile", 2), 8)
        events += day_job("prev-b", 8, 1, "feed", ("checkpoint_save", 5), 5)
        events += day_job("this-a", 9, 2, "ads", ("compile", 1), 9)
        events += day_job("this-b", 11, 4, "feed", ("checkpoint_save", 1), 9)
        store(events)
        shown = IsoWeek(2026, 11)
    # Rows of our own: a transactional test before this one flushes the seeded components.
    for name in ("pt2_compiler", "checkpointing"):
        Component.objects.update_or_create(name=name, defaults={"owner_team": "ads"})
    user = User.objects.create_user("owner", email="owner@example.com", password=PASSWORD)
    set_role(user, "owner", ["pt2_compiler", "checkpointing"])
    leaver = User.objects.create_user("leaver", email="leaver@example.com")
    subscription = Subscription.objects.create(user=leaver, email=leaver.email)
    subject = calculate(WeeklyReportQuery(shown, components=("checkpointing",
                                                             "pt2_compiler"))).subject
    return Scene(shown, subject, f"/reports/unsubscribe/{make_token(subscription.pk)}/")


def log_in(page: Page, live_server: LiveServer, next_url: str, username: str = "owner",
           password: str = PASSWORD) -> None:
    """Through the real login form, as a user would."""
    page.goto(f"{live_server.url}/accounts/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def shoot(page: Page, tmp_path: Path, name: str) -> None:
    """Always into the test's tmp_path; also into ETT_SCREENSHOT_DIR when set."""
    page.screenshot(path=str(tmp_path / name), full_page=True)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


def watched(browser: Browser, live_server: LiveServer, problems: list[str],
            external: list[str]) -> Page:
    """A page in a context of its own that notes console errors, failed responses and any
    request that leaves the live server."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    def console(message: ConsoleMessage) -> None:
        """Every console error (base.html names its icon, so not even a favicon 404)."""
        if message.type == "error":
            problems.append(f"console: {message.text} at {message.location}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("response", lambda response: problems.append(
        f"{response.status} {response.url}") if response.status >= 400 else None)
    page.on("request", lambda request: external.append(request.url)
            if not request.url.startswith((live_server.url, "data:", "about:")) else None)
    return page


@pytest.mark.browser
@pytest.mark.timeout(300 if SHOTS else 120)
def test_report_pages_in_a_browser(scene: Scene, live_server: LiveServer,
                                   browser: Browser, tmp_path: Path) -> None:
    """What only a browser shows: the chart decoded in the iframe, the frame fitted to
    the mail, the form filled in and saved, unsubscribing without a login, a clean console."""
    week, subject = scene.week, scene.subject
    assert subject.startswith(f"ETT% {week}: ")
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    log_in(page, live_server, f"/reports/preview/%3Fweek%3D{week}")
    page.wait_for_url(f"**/reports/preview/?week={week}")
    assert page.text_content("b.subject") == subject
    frame = page.frame_locator("iframe.email-preview")
    chart = frame.locator("img[src*='/reports/preview/chart.png?week=']")
    chart.wait_for()
    width = chart.evaluate("img => img.decode().then(() => img.naturalWidth)")
    assert width > 300  # the PNG decoded, not a broken-image icon
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300  # and shown at size on the page
    assert frame.locator("text=yours").first.is_visible()  # the components they own first
    fits = ("f => f.contentDocument && f.contentDocument.readyState === 'complete'"
            " && Math.abs(f.clientHeight - f.contentDocument.body.scrollHeight) <= 1")
    page.wait_for_function(f"({fits})(document.querySelector('iframe.email-preview'))",
                           timeout=10_000)
    assert frame.locator("text=Every number here is the dashboard").is_visible()
    assert page.locator("details summary").text_content() == "Plain-text part"
    shoot(page, tmp_path, "preview.png")

    page.click("a[href='/reports/settings/']")
    page.wait_for_url("**/reports/settings/")
    assert page.input_value("#id_email") == "owner@example.com"
    assert page.input_value("#id_time_zone") == "UTC"
    assert page.is_checked("#id_enabled") and page.is_checked("#id_fleet")
    assert page.is_checked("#id_owned")  # what they own is listed first
    assert page.text_content("#id_owned_helptext") == "you own checkpointing, pt2_compiler"
    assert not page.is_checked("input[name=components][value=scheduler]")
    assert page.locator("datalist#time-zones option[value='Europe/Berlin']").count() == 1
    shoot(page, tmp_path, "settings.png")
    page.fill("#id_time_zone", "Europe/Berlin")
    page.check("input[name=components][value=scheduler]")
    page.click("form.report-settings button[type=submit]")
    page.wait_for_url("**/reports/settings/?saved=1")
    assert "Next report: Monday 09:00 Europe/Berlin to owner@example.com." in (
        page.text_content("p.saved") or "")
    assert page.is_checked("input[name=components][value=scheduler]")

    page = watched(browser, live_server, problems, external)  # a fresh context: no login
    page.goto(f"{live_server.url}{scene.unsubscribe_url}")
    assert page.locator("header nav").count() == 0  # not logged in here
    assert "Stop sending the weekly ETT% report to leaver@example.com" in (
        page.text_content("section.card") or "")
    shoot(page, tmp_path, "unsubscribe.png")
    page.click("section.card button[type=submit]")
    page.wait_for_selector("text=Unsubscribed")
    assert "leaver@example.com will not receive the weekly ETT% report" in (
        page.text_content("section.card") or "")

    assert problems == []
    assert external == []
    assert (tmp_path / "preview.png").stat().st_size > 10_000
