"""Real Chromium on ``/jobs/<job>/``: log in; the timeline, the rank lanes, the waterfall and
the recoveries are drawn from the stored rows; a folded attempt's lanes draw at full width
when opened; nothing leaves the server; the console stays clean. Screenshots land in the
test's tmp_path (and ``ETT_SCREENSHOT_DIR`` when set)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Browser, Page
from pytest_django.live_server_helper import LiveServer

from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.attribution.rank_events import ranked_job, staggered_job
from tests.ettweb.reports.test_report_browser import log_in, shoot, watched

PASSWORD = "pw-job-page-1"


@pytest.fixture
def jobs(transactional_db: None) -> None:
    """A job of 256 ranks, a few of them slow (two lanes), and one whose 12 ranks each
    compiled for a different time (12 lanes: that attempt starts folded)."""
    wide = ranked_job(256, job="team/wide job", jitter_s=0.3, seed=5,
                      slow={3, 9, 10, 40, 41, 42, 100, 101, 200})
    refresh_jobs(ingest_lines(wide.lines() + staggered_job(12, job="many").lines()).jobs)
    User.objects.create_user("viewer", password=PASSWORD)


def plot_width(page: Page, div_id: str) -> float:
    return float(page.evaluate(
        "(id) => document.getElementById(id).querySelector('.main-svg')"
        ".getBoundingClientRect().width", div_id))


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_the_job_page_in_a_browser(jobs: None, live_server: LiveServer, browser: Browser,
                                   tmp_path: Path) -> None:
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    url = f"{live_server.url}/jobs/team/wide%20job/"
    page.goto(f"{live_server.url}/accounts/login/?next=/jobs/team/wide%2520job/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(url)
    for chart in ("phase-timeline", "lost-waterfall", "recovery-parts", "lanes-0", "lanes-1"):
        page.wait_for_selector(f"#{chart}.js-plotly-plot", timeout=30_000)
    assert page.locator("#lost-waterfall .point").count() >= 5  # wall, losses, productive
    assert page.locator("#lanes-0 .barlayer .point").count() >= 6  # 2 lanes of 6 phases
    assert page.locator("details.rank-lanes[open]").count() == 2
    width = plot_width(page, "phase-timeline")
    assert plot_width(page, "lanes-0") == pytest.approx(width, abs=2)
    shoot(page, tmp_path, "job.png")

    page.goto(f"{live_server.url}/jobs/many/")
    page.wait_for_selector("#lanes-1.js-plotly-plot", timeout=30_000)
    folded = page.locator("details#lanes-attempt-0")
    assert folded.get_attribute("open") is None  # 12 lanes: folded until asked for
    folded.locator("summary").click()
    page.wait_for_selector("#lanes-0.js-plotly-plot", timeout=30_000)
    page.wait_for_function(
        "([id, width]) => Math.abs(document.getElementById(id).querySelector('.main-svg')"
        ".getBoundingClientRect().width - width) < 2", arg=["lanes-0", width], timeout=10_000)
    assert page.locator("#lanes-0 .barlayer .point").count() == 24  # 12 lanes x 2 states
    shoot(page, tmp_path, "job-lanes-open.png")

    # At a phone's width a lane chart's legend wraps into rows the server did not plan
    # for: the chart is drawn taller rather than failing ("axis scaling"), and none of the
    # page's charts is left undrawn.
    page.set_viewport_size({"width": 380, "height": 800})
    page.goto(f"{live_server.url}/jobs/team/wide%20job/")
    page.wait_for_function("() => [...document.querySelectorAll('.plotly-graph-div')]"
                           ".every(d => d.classList.contains('js-plotly-plot'))",
                           timeout=30_000)
    shoot(page, tmp_path, "job-phone.png")
    assert problems == [] and external == []


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_a_parked_job_in_a_browser(transactional_db: None, live_server: LiveServer,
                                   browser: Browser, tmp_path: Path) -> None:
    """A job whose refresh is parked says so above its numbers, in a card that reads as a
    warning, and the page still draws every chart."""
    from ettweb.rollups.models import ParkedRefresh

    refresh_jobs(ingest_lines(staggered_job(4, job="held").lines()).jobs)
    ParkedRefresh.objects.create(
        job="held", failures=2, parked_at=timezone.now(),
        error="JobOutOfBounds: job window from 2026-03-01 00:00:00 UTC to 1e+18 s lies "
              "outside the dates a rollup can hold (years 1-9999)")
    User.objects.create_user("viewer", password=PASSWORD)
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    log_in(page, live_server, "/jobs/held/", "viewer", PASSWORD)
    page.wait_for_url(f"{live_server.url}/jobs/held/")
    notice = page.locator("#refresh-parked")
    assert "Numbers not current: refresh parked" in notice.inner_text()
    assert notice.bounding_box()["y"] < page.locator(".tiles").bounding_box()["y"]  # type: ignore[index]
    page.wait_for_selector("#phase-timeline.js-plotly-plot", timeout=30_000)
    shoot(page, tmp_path, "job-parked.png")
    assert problems == [] and external == []
