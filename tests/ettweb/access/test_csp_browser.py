"""Real Chromium under the Content-Security-Policy: every chart page draws its charts with
no inline script, no console error and no policy violation.

Chromium reports a blocked script, style, image or frame both as a console error and as a
``securitypolicyviolation`` event; both are collected, in every frame (the report preview's
mail is an iframe that inherits the page's policy).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, ConsoleMessage, Page
from pytest_django.live_server_helper import LiveServer

from ettweb.rollouts.models import Rollout
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

PASSWORD = "pw-csp-browser-1"
RANGE = "date_from=2026-03-01&date_to=2026-03-15"
#: Every securitypolicyviolation of the document (init scripts run in every frame and are
#: not subject to the page's policy).
VIOLATIONS = """document.addEventListener('securitypolicyviolation', e => {
    (window.top.__csp = window.top.__csp || []).push(
        `${e.violatedDirective} blocked ${e.blockedURI || 'inline'}`
        + ` (${e.sourceFile}:${e.lineNumber})`);
});"""
#: Each figure block's div has plotly's drawing in it: the plot container and its SVG.
DRAWN = """() => Array.from(document.querySelectorAll("script.ett-figure")).map(block => {
    const div = document.getElementById(block.dataset.target);
    return [block.dataset.target,
            !!(div && div.querySelector('.plot-container') && div.querySelector('svg.main-svg'))];
})"""


@pytest.fixture
def fleet(transactional_db: None) -> dict[str, Any]:
    """Two teams' jobs on Mar 8-12, 2026, a rollout on Mar 10, and an admin who sees every
    page and its edit links (ORM work here: none once the browser runs)."""
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"ads-b{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ads-a{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
        events += day_job(f"feed-b{n}", 8 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
        events += day_job(f"feed-a{n}", 11 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
    store(events)
    User.objects.create_user("boss", password=PASSWORD, is_superuser=True,
                             email="boss@example.com")
    rollout = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                     at=datetime(2026, 3, 10, 12, tzinfo=UTC),
                                     scope={"teams": ["ads"]})
    return {"rollout": rollout.pk}


def watched(browser: Browser, live_server: LiveServer, problems: list[str]) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            problems.append(f"console {message.type}: {message.text} at {message.location}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", lambda request: problems.append(f"left the machine: {request.url}")
            if not request.url.startswith((live_server.url, "data:", "about:")) else None)
    page.add_init_script(VIOLATIONS)
    return page


def drawn_charts(page: Page) -> dict[str, bool]:
    """Each chart of the page (every figure block) and whether plotly drew it."""
    page.wait_for_load_state("load")
    page.wait_for_function(f"({DRAWN})().every(([, drawn]) => drawn)", timeout=30_000)
    return dict(page.evaluate(DRAWN))


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_chart_pages_draw_under_the_policy(fleet: dict[str, Any], live_server: LiveServer,
                                           browser: Browser) -> None:
    problems: list[str] = []
    page = watched(browser, live_server, problems)
    page.goto(f"{live_server.url}/accounts/login/?next=/fleet/%3F{RANGE.replace('&', '%26')}")
    page.fill("#id_username", "boss")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"**/fleet/?{RANGE}")
    charts = {"/fleet/": drawn_charts(page)}
    for path in (f"/?{RANGE}", "/jobs/ads-b0/", f"/components/pt2_compiler/?{RANGE}",
                 f"/rollouts/{fleet['rollout']}/?window=2"):
        page.goto(f"{live_server.url}{path}")
        charts[path] = drawn_charts(page)
    for path, drawn in charts.items():
        assert drawn, f"{path} has no chart"
        assert all(drawn.values()), f"{path}: not drawn: {drawn}"
    assert {"ett-trend", "lost-over-time"} <= set(charts["/fleet/"])
    assert "phase-timeline" in charts["/jobs/ads-b0/"]
    assert {"component-lost", "component-share"} <= set(
        charts[f"/components/pt2_compiler/?{RANGE}"])
    assert "impact-trend" in charts[f"/rollouts/{fleet['rollout']}/?window=2"]

    # The report preview: the mail (an iframe under the same policy) with its chart (a
    # same-origin image URL),
    # the frame fitted to it by static JS (no inline handler).
    page.goto(f"{live_server.url}/reports/preview/?week=2026-W11")
    chart = page.frame_locator("iframe.email-preview").locator(
        "img[src*='/reports/preview/chart.png']")
    assert chart.evaluate("img => img.decode().then(() => img.naturalWidth)") > 300
    page.wait_for_function(
        "() => { const f = document.querySelector('iframe.email-preview');"
        " return f.contentDocument.body.scrollHeight > 300"
        " && Math.abs(f.clientHeight - f.contentDocument.body.scrollHeight) <= 1; }",
        timeout=10_000)

    # Pages without charts load clean too: the phase map, the admin, the API's docs.
    for path, ready in (("/components/pt2_compiler/phases/", "#phase-map"),
                        ("/admin/", "#content"), ("/api/v1/docs", ".swagger-ui .info")):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_selector(ready, timeout=30_000)
    assert page.evaluate("window.__csp || []") == []
    assert problems == []


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_an_inline_script_is_refused(fleet: dict[str, Any], live_server: LiveServer,
                                     browser: Browser) -> None:
    """The policy is in force, not only sent: a page that gained an inline script (as a
    failed escape would give it) does not run it, and Chromium says so."""
    problems: list[str] = []
    page = watched(browser, live_server, problems)
    page.goto(f"{live_server.url}/accounts/login/")
    page.evaluate("""() => { const s = document.createElement('script');
        s.textContent = 'window.ran = 1'; document.body.appendChild(s); }""")
    assert page.evaluate("window.ran") is None
    assert any("script-src" in v for v in page.evaluate("window.__csp || []"))
    assert any("Content Security Policy" in p for p in problems)
