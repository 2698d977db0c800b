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
