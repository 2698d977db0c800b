"""Real Chromium: the job filter on the fleet overview, a component page and the rollouts list
changes the URL and the numbers, the previous period draws dashed, and the links keep the
filter. No request leaves the server, the console stays clean; screenshots land in the test's
tmp_path (and ``ETT_SCREENSHOT_DIR`` when set)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser
from pytest_django.live_server_helper import LiveServer

from ettweb.pages.templatetags.ett_format import hours
from ettweb.rollouts.models import Rollout
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.reports.test_report_browser import shoot, watched

PASSWORD = "pw-filters-1"
TRACES_JS = """id => document.getElementById(id).data.map(
    t => ({name: t.name, meta: t.meta || null, dash: (t.line || {}).dash || null,
           hovertext: t.hovertext || null}))"""

#: Page coordinates of the previous period's first point, from plotly's own axes.
DASHED_POINT_JS = """id => {
    const gd = document.getElementById(id), box = gd.getBoundingClientRect();
    const trace = gd.data.find(t => t.meta === 'previous');
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const x = xa.d2l(trace.x[0]) + 43200000;  // drawn in the middle of its day
    return {x: box.left + xa._offset + xa.l2p(x), y: box.top + ya._offset + ya.l2p(trace.y[0])};
}"""


@pytest.fixture
def prepared(transactional_db: None) -> None:
    scoped_fleet.ingest()
    for name, scope in (("ads cache", {"teams": ["ads"]}), ("feed cache", {"teams": ["feed"]})):
        Rollout.objects.create(name=name, component="pt2_compiler", scope=scope,
                               at=datetime(2026, 3, 5, 12, tzinfo=UTC))
    User.objects.create_user("viewer", password=PASSWORD)


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_filters_change_the_url_and_the_numbers(prepared: None, live_server: LiveServer,
                                                browser: Browser, tmp_path: Path) -> None:
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    start = "/fleet/?date_from=2026-03-04&date_to=2026-03-07"
    page.goto(f"{live_server.url}/accounts/login/?next={start.replace('&', '%26')}")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{start}")
    page.wait_for_selector("#ett-trend.js-plotly-plot", timeout=30_000)
    whole = page.text_content("#range-ett")

    # The fleet: team ads, the previous period (Feb 28 to Mar 3) on.
    page.fill("#id_team", "ads")
    page.check("#id_compare")
    page.click("#fleet-filters button[type=submit]")
    page.wait_for_url("**team=ads**")
    assert "compare=previous" in page.url
    page.wait_for_selector("#ett-trend.js-plotly-plot", timeout=30_000)
    assert page.text_content("#range-ett") == "75.00%" != whole  # the formula job, 1.5 / 2
    assert page.input_value("#id_team") == "ads" and page.is_checked("#id_compare")
    traces = page.evaluate(TRACES_JS, "ett-trend")
    assert [t["dash"] for t in traces if t["meta"] == "previous"] == ["dash"]
    [lane] = [t for t in traces if t["meta"] == "rollouts"]  # ads cache only, not feed's
    assert lane["name"] == "rollouts · pt2_compiler" and len(lane["hovertext"]) == 1
    assert "ads cache" in lane["hovertext"][0]
    for chart in ("lost-by-component", "lost-over-time", "lifecycle"):
        page.wait_for_selector(f"#{chart}.js-plotly-plot", timeout=30_000)
    assert page.locator("#ett-trend .scatterlayer .trace").count() >= 2
    # Hovering a dashed point names its own day: Mar 6 on the axis is Mar 2 (ads-m1-east).
    spot = page.evaluate(DASHED_POINT_JS, "ett-trend")
    page.mouse.move(spot["x"], spot["y"])
    page.wait_for_selector("#ett-trend .hoverlayer .hovertext", timeout=10_000)
    shown = page.text_content("#ett-trend .hoverlayer .hovertext") or ""
    assert "2026-03-02: 83.33%" in shown and "previous period" in shown
    shoot(page, tmp_path, "fleet-filtered.png")

    # Its component link keeps the filter; the component page narrows the same way.
    page.click("#lost-table a:text('pt2_compiler')")
    page.wait_for_url("**/components/pt2_compiler/**team=ads**")
    page.wait_for_selector("#component-lost.js-plotly-plot", timeout=30_000)
    assert page.text_content("#component-lost-hours") == hours(0.5)
    assert page.input_value("#id_team") == "ads"
    page.fill("#id_date_from", "2026-03-01")
    page.click("#component-filters button[type=submit]")
    page.wait_for_url("**date_from=2026-03-01**")
    assert page.text_content("#component-lost-hours") == hours(2.5)  # and ads-m1-east's compile
    page.fill("#id_team", "feed")
    page.select_option("#id_gpus", "9-64")
    page.click("#component-filters button[type=submit]")
    page.wait_for_url("**gpus=9-64**")
    page.wait_for_selector("#component-lost.js-plotly-plot", timeout=30_000)
    assert page.text_content("#component-lost-hours") == hours(32.0)  # feed-m1-east, 16 x 2 h
    shoot(page, tmp_path, "component-filtered.png")

    # The rollouts list: only the rollouts whose scope can reach team ads.
    page.goto(f"{live_server.url}/rollouts/?team=ads&component=pt2_compiler")
    assert page.locator("#rollouts tbody tr").count() == 1
    assert "ads cache" in page.inner_text("#rollouts")
    page.fill("#id_team", "feed")
    page.click("#rollout-filters button[type=submit]")
    page.wait_for_url("**team=feed**")
    assert "feed cache" in page.inner_text("#rollouts")
    assert "ads cache" not in page.inner_text("#rollouts")
    shoot(page, tmp_path, "rollouts-filtered.png")
    assert problems == [] and external == []
