"""Real Chromium: rollout markers on the fleet trend and the component page's charts.

Only a browser shows that plotly.js draws the lanes, that hover text reads as text (the
escaped names come back as ``<script>`` characters, never as markup), and that a click on a
marker opens the rollout. Chromium comes from the system (``/usr/bin/chromium``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page
from pytest_django.live_server_helper import LiveServer

from ettweb.rollouts.models import Rollout
from tests.ettweb.components.fleet import ingest_fleet

PASSWORD = "pw-browser-2"
EVIL = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
LANES_JS = """id => document.getElementById(id).data
    .filter(t => t.meta === 'rollouts')
    .map(t => ({name: t.name, text: t.text, hovertext: t.hovertext, customdata: t.customdata}))"""




@pytest.fixture
def prepared(transactional_db: None) -> dict[str, int]:
    """The component fleet (Mar 1-3, 2026; the default range is Feb 2-Mar 3) and rollouts:
    a single one on Feb 10, two close ones on Mar 2 (one cluster), and one with a hostile
    name and scope in another lane."""
    ingest_fleet()
    User.objects.create_user(username="viewer", password=PASSWORD, is_staff=True)

    def rollout(name: str, component: str, at: datetime, **extra: Any) -> int:
        return Rollout.objects.create(name=name, component=component, at=at, **extra).pk

    return {
        "single": rollout("plan cache", "pt2_compiler", datetime(2026, 2, 10, 12, tzinfo=UTC),
                          link="https://wiki.test/plan-cache"),
        "close1": rollout("dynamic shapes", "pt2_compiler", datetime(2026, 3, 2, 9, tzinfo=UTC)),
        "close2": rollout("autotune pruning", "pt2_compiler",
                          datetime(2026, 3, 2, 11, tzinfo=UTC)),
        "evil": rollout(EVIL, "checkpointing", datetime(2026, 2, 20, tzinfo=UTC),
                        scope={"teams": [EVIL]}, link="javascript:window.pwned=3"),
    }


def _login(page: Page, base: str, path: str) -> None:
    page.goto(f"{base}{path}")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{path}")


def _marker_position(page: Page, chart: str, lane_name: str) -> dict[str, float]:
    """Page coordinates of a lane's first marker, from plotly's own axes."""
    position: dict[str, float] = page.evaluate(
        """([id, name]) => {
            const gd = document.getElementById(id), box = gd.getBoundingClientRect();
            const lane = gd.data.find(t => t.name === name);
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis2;  // the lanes' axis
            return {x: box.left + xa._offset + xa.l2p(xa.d2l(lane.x[0])),
                    y: box.top + ya._offset + ya.l2p(lane.y[0])};
        }""", [chart, lane_name])
    return position


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_rollout_markers_draw_hover_and_click(prepared: dict[str, int], live_server: LiveServer,
                                              browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    external: list[str] = []
    page.on("request", lambda request: external.append(request.url)
            if not request.url.startswith(live_server.url) else None)
    _login(page, live_server.url, "/fleet/")

    page.wait_for_selector("#ett-trend.js-plotly-plot", timeout=30_000)
    lanes = page.evaluate(LANES_JS, "ett-trend")
    assert [lane["name"] for lane in lanes] == ["rollouts · checkpointing",
                                                "rollouts · pt2_compiler"]
    evil, pt2 = lanes
    assert evil["customdata"] == [f"/rollouts/{prepared['evil']}/"]
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in evil["hovertext"][0]
    assert "javascript" not in evil["hovertext"][0]
    assert pt2["text"] == ["", "2"]  # a single rollout, then a cluster of two
    assert pt2["customdata"] == [
        f"/rollouts/{prepared['single']}/",
        "/rollouts/?component=pt2_compiler&date_from=2026-03-02&date_to=2026-03-02"]
    assert "plan cache" in pt2["hovertext"][0] and "wiki.test/plan-cache" in pt2["hovertext"][0]
    assert "2 rollouts" in pt2["hovertext"][1] and "dynamic shapes" in pt2["hovertext"][1]
    assert page.locator("#ett-trend .scatterlayer .trace .point").count() >= 3 + 3

    # Hovering the hostile marker shows its name as text: no markup, nothing ran.
    spot = _marker_position(page, "ett-trend", "rollouts · checkpointing")
    page.mouse.move(spot["x"], spot["y"])
    page.wait_for_selector("#ett-trend .hoverlayer .hovertext", timeout=10_000)
    shown = page.text_content("#ett-trend .hoverlayer .hovertext") or ""
    assert "<script>window.pwned=1</script>" in shown
    assert page.evaluate("window.pwned") is None

    # A click on the single marker opens the rollout's page.
    # plotly throttles hover updates and a click reports the hovered point: wait until the
    # hover label is this marker's, or the click may still report the previous one.
    spot = _marker_position(page, "ett-trend", "rollouts · pt2_compiler")
    page.mouse.move(spot["x"], spot["y"])
    page.wait_for_function(
        "() => (document.querySelector('#ett-trend .hoverlayer .hovertext') || {})"
        ".textContent?.includes('plan cache')", timeout=10_000)
    page.mouse.click(spot["x"], spot["y"])
    page.wait_for_url(f"{live_server.url}/rollouts/{prepared['single']}/", timeout=10_000)

    # The component page draws both charts, each with the component's own lane only.
    page.goto(f"{live_server.url}/components/pt2_compiler/")
    for chart in ("component-lost", "component-share"):
        page.wait_for_selector(f"#{chart}.js-plotly-plot", timeout=30_000)
        assert [lane["name"] for lane in page.evaluate(LANES_JS, chart)] == [
            "rollouts · pt2_compiler"]
    assert page.locator("#component-lost .barlayer .point").count() == 3  # Mar 1, 2, 3
    assert page.text_content("#component-lost-hours") == "8.00"
    assert page.evaluate("window.pwned") is None
    assert external == []  # nothing loaded from outside our server
