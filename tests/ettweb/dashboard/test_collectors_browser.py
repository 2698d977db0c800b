"""Real Chromium on ``/collectors/``: log in, the silent collector is flagged and styled, the
filter form changes the URL and the rows, no request leaves the server, the console is clean.
A screenshot lands in the test's tmp_path (and ``ETT_SCREENSHOT_DIR`` when set)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Browser
from pytest_django.live_server_helper import LiveServer

from ettweb.ingest.models import CollectorHealth
from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.reports.test_report_browser import shoot, watched

PASSWORD = "pw-collectors-1"


@pytest.fixture
def collectors(transactional_db: None) -> None:
    for source, minutes_ago, backlog in (("node-a", 0.2, 12), ("node-b", 0.4, 0),
                                         ("node-gone", 95, 4000)):
        CollectorHealth.objects.create(source=source, backlog_events=backlog,
                                       shipped_events=10_000, dropped_events=2)
        CollectorHealth.objects.filter(source=source).update(
            updated_at=timezone.now() - timedelta(minutes=minutes_ago))
    ingest_batch([json.dumps({"v": 1, "id": "e1", "job": "j", "kind": "mark"}), "{oops"],
                 "node-a", None)
    User.objects.create_user("viewer", password=PASSWORD)


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_collectors_page_in_a_browser(collectors: None, live_server: LiveServer,
                                      browser: Browser, tmp_path: Path) -> None:
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    page.goto(f"{live_server.url}/accounts/login/?next=/collectors/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/collectors/")
    assert page.text_content("#collectors-silent") == "1"
    first = page.locator("#collectors-table tbody tr").first
    assert "node-gone" in first.inner_text() and "silent" in first.inner_text()
    colour = first.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
    assert colour != "rgba(0, 0, 0, 0)"  # the stylesheet loaded and marks the row
    assert page.locator("#rejected-table tbody tr").count() == 2
    # Last seen in words ("95 min ago"), the exact UTC time on hover.
    seen = first.locator("time").first
    assert seen.inner_text() == "95 min ago"
    assert (seen.get_attribute("title") or "").endswith(" UTC")
    shoot(page, tmp_path, "collectors.png")

    page.fill("#id_silent_after", "120")  # two hours: node-gone (95 min) is not silent then
    page.click("#collectors-filters button[type=submit]")
    page.wait_for_url("**silent_after=120**")
    assert page.text_content("#collectors-silent") == "0"
    page.click("#collectors-table a:text('node-a')")
    page.wait_for_url("**source=node-a**")
    assert page.text_content("#collectors-count") == "1"
    assert problems == [] and external == []
