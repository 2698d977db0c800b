"""Real Chromium on the rollout page: plotly.js (served by us) draws all four charts, the
window form reloads the numbers, and nothing is requested from outside the machine."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser
from pytest_django.live_server_helper import LiveServer

from ettweb.rollouts.models import Rollout
from tests.ettweb.reports.test_report_browser import shoot
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

PASSWORD = "pw-rollout-1"
CHARTS = ("impact-trend", "change-intervals", "job-distributions", "component-shifts")




@pytest.fixture
def rollout_id(transactional_db: None) -> int:
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"ads-b{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ads-a{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
        events += day_job(f"feed-b{n}", 8 + n % 2, 2, "feed", ("compile", n % 3), 10 - n % 3)
        events += day_job(f"feed-a{n}", 11 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
    store(events)
    User.objects.create_user(username="viewer", password=PASSWORD)
    rollout = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                     at=datetime(2026, 3, 10, 12, tzinfo=UTC),
                                     scope={"teams": ["ads"]})
    return rollout.pk


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_rollout_page_draws_its_charts(rollout_id: int, live_server: LiveServer,
                                       browser: Browser, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    external: list[str] = []
    page.on("request", lambda request: external.append(request.url)
            if not request.url.startswith(live_server.url) else None)
    page.goto(f"{live_server.url}/accounts/login/?next=/rollouts/{rollout_id}/%3Fwindow%3D2")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"**/rollouts/{rollout_id}/?window=2")
    for chart in CHARTS:
        page.wait_for_selector(f"#{chart}.js-plotly-plot", timeout=30_000)
    assert page.text_content("#treated-change") == "+10.00 pts"
    names = page.evaluate("document.getElementById('impact-trend').data.map(t => t.name)")
    assert names == ["treated (in scope)", "control (out of scope)"]
    shaded = page.evaluate("document.getElementById('impact-trend').layout.shapes.length")
    assert shaded == 3  # before window, after window, the rollout line
    boxes = page.locator("#job-distributions .boxlayer path.box")
    assert boxes.count() == 2  # before and after, drawn as SVG by plotly.js
    intervals = page.evaluate("document.getElementById('change-intervals').data[0].y")
    assert intervals == ["pt2_compiler lost share", "ETT% adjusted", "ETT% treated",
                         "ETT% control", "ETT% DiD"]
    shoot(page, tmp_path, "rollout.png")  # also into ETT_SCREENSHOT_DIR when set

    page.fill("#id_window", "1")
    page.click("#window-form button[type=submit]")
    page.wait_for_url("**window=1**")
    page.wait_for_selector("#impact-trend.js-plotly-plot", timeout=30_000)
    windows = page.text_content("#window-form") or ""
    assert "before 2026-03-09 \u2013 2026-03-09" in windows  # W = 1: one day each side
    assert external == []
