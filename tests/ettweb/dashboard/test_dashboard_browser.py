"""One real-browser check: log in with Chromium and see the plotly timeline render.

Template tests cannot tell whether plotly.js actually loads from our static files and draws;
only a browser can. Chromium comes from the system (``/usr/bin/chromium``), never downloaded.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser
from pytest_django.live_server_helper import LiveServer

from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.stale_fleet import store_stale_fleet

PASSWORD = "pw-browser-1"
#: For a figure's id: its legend entries, the names of those drawn outside the figure, and the
#: height of plotly's legend scrollbar (0 when the legend needs none).
LEGEND_ON_SCREEN = """(id) => {
  const root = document.getElementById(id);
  const box = root.querySelector('.main-svg').getBoundingClientRect();
  const entries = [...root.querySelectorAll('.legend .traces')];
  const outside = entries.filter(e => {
    const r = e.getBoundingClientRect();
    return r.top < box.top || r.bottom > box.bottom || r.left < box.left || r.right > box.right;
  }).map(e => e.textContent);
  const bar = root.querySelector('.legend .scrollbar');
  return {entries: entries.length, traces: root.data.length, outside,
          scrollbar_px: bar ? bar.getBoundingClientRect().height : 0};
}"""




@pytest.fixture
def prepared(transactional_db: None, worked_example_lines: list[str]) -> str:
    ingest_batch(worked_example_lines)
    User.objects.create_user(username="viewer", password=PASSWORD)
    return "viewer"


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_login_and_job_timeline_renders(prepared: str, live_server: LiveServer,
                                        browser: Browser) -> None:
    page = browser.new_page()
    external: list[str] = []
    page.on("request", lambda request: external.append(request.url)
            if not request.url.startswith(live_server.url) else None)

    page.goto(f"{live_server.url}/jobs/j1/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", prepared)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/j1/")

    assert page.text_content("#job-ett") == "70.80%"
    page.wait_for_selector("#phase-timeline.js-plotly-plot", timeout=30_000)
    bars = page.locator("#phase-timeline .barlayer .point")
    assert bars.count() > 5  # one bar per timeline piece, drawn as SVG by plotly.js
    # Every category's legend entry is inside the figure: none behind a legend scrollbar.
    legend = page.evaluate(LEGEND_ON_SCREEN, "phase-timeline")
    assert legend["entries"] == legend["traces"] >= 6 and legend["outside"] == []
    assert legend["scrollbar_px"] == 0
    assert page.locator("#lost-by-component.js-plotly-plot").count() == 1
    assert external == []  # nothing loaded from outside our server

    # The fleet overview draws its charts too, and the group selector reloads the page.
    page.goto(f"{live_server.url}/fleet/")
    assert page.text_content("#range-ett") == "70.80%"
    for chart in ("ett-trend", "lost-by-component", "restart-tax", "lifecycle"):
        page.wait_for_selector(f"#{chart}.js-plotly-plot", timeout=30_000)
    page.select_option("#id_group_by", "team")
    page.click("#fleet-filters button[type=submit]")
    page.wait_for_url("**group_by=team**")
    page.wait_for_selector("#ett-trend.js-plotly-plot", timeout=30_000)
    names = page.evaluate("document.getElementById('ett-trend').data.map(t => t.name)")
    assert names == ["ads"]  # the worked example's team
    assert external == []


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_a_stale_job_reads_as_stale_in_the_browser(transactional_db: None,
                                                   live_server: LiveServer,
                                                   browser: Browser) -> None:
    """The jobs list's stale chip and note, and the job page's, as a reader sees them: the
    chip's exact time on hover, the note's link to the stale jobs alone."""
    store_stale_fleet()
    User.objects.create_user(username="viewer", password=PASSWORD)
    page = browser.new_page()
    page.goto(f"{live_server.url}/accounts/login/?next=/%3Fsort%3Djob")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/?sort=job")
    chip = page.locator("#jobs-table .status.stale")
    assert chip.count() == 1 and chip.inner_text() == "stale, last heard 10 min ago"
    assert chip.locator("time").get_attribute("title", timeout=5_000).endswith(" UTC")
    assert page.locator("#jobs-table .status.running").count() == 1  # "live"
    page.click("#jobs-stale a")
    page.wait_for_url("**status=stale**")
    assert page.locator("#jobs-table tbody tr").count() == 1
    page.goto(f"{live_server.url}/jobs/gone/")
    assert "last heard 10 min ago" in page.inner_text("#job-stale")
    assert page.locator("#attempts .status.stale").count() == 1
