"""Real Chromium on the report pages: the preview's iframe shows the e-mail with its chart
loaded, the settings form shows the defaults and saves, and the console stays clean; the
mail's HTML itself at a desktop client's 600 px and a phone's 380 px.

README screenshots: ``ETT_SCREENSHOT_DIR=/some/dir pytest -m browser
tests/ettweb/reports/test_report_browser.py`` also writes ``preview.png``, ``settings.png``
and ``unsubscribe.png`` there (full page), previewing the last complete week of a simulated
fleet (``simulate_fleet``'s defaults, about 10 s) instead of the small hand-made one, and
``mail-600.png`` and ``mail-380.png``.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from io import StringIO
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
from ettweb.reports.chart import SCALE, WIDTH_PX
from ettweb.reports.content import ReportCache, render_for
from ettweb.reports.models import Subscription
from ettweb.reports.unsubscribe import make_token
from ettweb.rollouts.models import Rollout
from tests.ettweb.reports.test_chart import PHONE_CHART_PX
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


@dataclass(frozen=True)
class Mail:
    html: str  # the HTML part as sent, its chart inline as a data: URI instead of cid:
    rollouts: int  # numbered lines on its chart


#: A rollout name with nowhere to wrap: the narrow layout must still not scroll sideways.
UNBROKEN = "checkpoint-shard-prefetch-and-async-upload-for-every-cluster-v2"


@pytest.fixture
def mail(db: None) -> Mail:
    """A simulated fleet's week 2026-W07 (a rollout in it, a dozen on its chart, the warm
    pass's verdicts), the fleet's report rendered as the mail carries it."""
    call_command("simulate_fleet", "--no-progress", "--end", "2026-03-01")
    Rollout.objects.create(name=UNBROKEN, component="checkpointing",
                           at=datetime(2026, 2, 11, 9, tzinfo=UTC), scope={})
    call_command("ett_warm_impacts", stdout=StringIO())
    week, cache = IsoWeek(2026, 7), ReportCache()
    report = cache.report(week, ())
    png = base64.b64encode(cache.chart(week, report)).decode()
    rendered = render_for(None, week, cache, chart_src=f"data:image/png;base64,{png}")
    return Mail(rendered.html, len(report.history_markers))


@pytest.mark.browser
@pytest.mark.timeout(120)
@pytest.mark.parametrize("width", [600, 380])
def test_the_mail_reads_at_600_and_380_px(mail: Mail, browser: Browser, tmp_path: Path,
                                          width: int) -> None:
    """Nothing scrolls sideways; the chart fits, at its full 520 px where there is room and
    at least the width its fonts are sized for on a phone; the key is a table of rollout,
    component, day and verdict, the verdict's words in its header on a phone."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.set_content(mail.html)
    chart = page.locator("img")
    assert chart.evaluate("img => img.decode().then(() => img.naturalWidth)") == \
        WIDTH_PX * SCALE
    scroll, client = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert scroll <= client == width
    rightmost = page.evaluate("() => Math.max(...[...document.querySelectorAll('body *')]"
                              ".map(e => e.getBoundingClientRect().right))")
    assert rightmost <= width
    box = chart.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    if width >= 600:
        assert box["width"] == WIDTH_PX
    else:
        assert PHONE_CHART_PX <= box["width"] < WIDTH_PX
    natural = chart.evaluate("img => img.naturalHeight / img.naturalWidth")
    assert abs(box["height"] / box["width"] - natural) < 0.01  # scaled, not squashed

    key = page.locator("table.chart-key")
    headers = [" ".join(t.split()) for t in key.locator("th").all_inner_texts()]
    rows = key.locator("tr")
    assert rows.count() == mail.rollouts + 1
    assert UNBROKEN in key.inner_text()
    verdicts = [" ".join(t.split()) for t in key.locator("tr td:nth-child(4)").all_inner_texts()]
    if width >= 600:
        assert headers == ["rollout", "component", "day", "verdict"]
        assert any(v.startswith("lost share ") and " ETT% " in v for v in verdicts)
    else:  # a phone's client reads the <style>: the words move to the header
        assert headers == ["rollout", "component", "day", "verdict lost share, ETT%"]
        assert not any("lost share" in v for v in verdicts)
    shoot(page, tmp_path, f"mail-{width}.png")
    assert problems == []
