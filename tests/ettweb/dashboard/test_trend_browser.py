"""Real Chromium: the fleet trend shows change (issue 28). Its ETT% axis fits the data and a
button restores 0-100; GPU-size groups are listed by size; a weekly view marks the weeks the
range covers in part. Read from plotly's own state in the page, as the user sees it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page
from pytest_django.live_server_helper import LiveServer

from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.reports.test_report_browser import log_in, shoot, watched

PASSWORD = "pw-trend-1"
STATE_JS = """id => {
    const gd = document.getElementById(id);
    return {range: gd._fullLayout.yaxis.range, names: gd.data.map(t => t.name),
            symbols: gd.data.map(t => (t.marker || {}).symbol || null),
            buttons: Array.from(gd.querySelectorAll('.updatemenu-button')).map(
                b => b.textContent)};
}"""


@pytest.fixture
def prepared(transactional_db: None) -> None:
    scoped_fleet.ingest()
    User.objects.create_user("viewer", password=PASSWORD)


def _open(page: Page, live_server: LiveServer, path: str) -> dict[str, object]:
    page.goto(f"{live_server.url}{path}")
    page.wait_for_selector("#ett-trend.js-plotly-plot", timeout=30_000)
    state: dict[str, object] = page.evaluate(STATE_JS, "ett-trend")
    return state


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_the_trend_fits_orders_its_groups_and_marks_partial_weeks(
        prepared: None, live_server: LiveServer, browser: Browser, tmp_path: Path) -> None:
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    log_in(page, live_server, "/", "viewer", PASSWORD)
    page.wait_for_url("**/")

    # March 2-5: daily ETT% between 75% and 84%, drawn on an axis that fits it.
    state = _open(page, live_server, "/fleet/?date_from=2026-03-02&date_to=2026-03-05")
    low, high = state["range"]  # type: ignore[misc]
    assert 50 < low < 75 and 84 < high < 100, state
    assert state["buttons"] == ["fit to data", "0-100%"]
    page.click(".updatemenu-button >> text=0-100%")
    assert page.evaluate(STATE_JS, "ett-trend")["range"] == [0, 100]
    shoot(page, tmp_path, "trend-fitted.png")

    # By GPU-size bucket: the legend in size order, not as text sorts ("9-64" after "2-8").
    state = _open(page, live_server, "/fleet/?date_from=2026-03-02&date_to=2026-03-05"
                                     "&group_by=gpus")
    assert state["names"] == ["1", "2-8", "9-64"]

    # Weekly from a Wednesday to a Thursday: both weeks partial, drawn as open markers.
    state = _open(page, live_server, "/fleet/?date_from=2026-03-04&date_to=2026-03-12"
                                     "&interval=week")
    assert state["symbols"][0] == ["circle-open"]  # type: ignore[index]
    shoot(page, tmp_path, "trend-partial-weeks.png")

    # No data in the range: a dash, not "0.00%", on the fleet page and the jobs list.
    page.goto(f"{live_server.url}/fleet/?date_from=2001-01-01&date_to=2001-01-07")
    assert page.text_content("#range-ett") == "—"
    page.goto(f"{live_server.url}/?date_from=2001-01-01&date_to=2001-01-07")
    assert page.text_content("#fleet-ett") == "—"
    assert problems == [] and external == []
