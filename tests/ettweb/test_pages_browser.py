"""Real Chromium on every page (issue 14): one tour, logged in as an admin, of every HTML page
Django's URL resolver knows.

Why a tour rather than one test per page: the page tests check each page's numbers in depth;
this checks what only a browser shows, on *every* page, including the ones no other browser
test opens (the rollout form, the phase map, password change). On each page of the tour:

* no console error, no page error, no response of 400 or more, no request that leaves the
  live server (:func:`~tests.ettweb.reports.test_report_browser.watched`);
* every chart the page draws (each ``.js-plotly-plot``) has a trace with data points, and the
  charts that page is known for are there;
* a full-page screenshot (``page-<route>.png``) in the test's tmp_path and in
  ``ETT_SCREENSHOT_DIR`` when set (``make test`` sets it: artifacts/screenshots/);
* where the page has a GET filter form, one filter is changed to a value that picks a subset:
  the URL must then carry that parameter and the page's numbers and charts must change.

The pages come from the resolver, not from a list kept by hand: a route the tour does not
know how to fill, and that :data:`EXCLUDED` does not name with its reason, fails the test
with its name, so a page added later joins the tour the day it lands.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from django.contrib.auth.models import User
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError
from pytest_django.live_server_helper import LiveServer

from ettweb.access.roles import ADMIN, set_role
from ettweb.changes.models import Change
from ettweb.components.models import Component
from ettweb.ingest.models import CollectorHealth
from ettweb.ingest.tasks import ingest_batch
from ettweb.reports.models import Subscription
from ettweb.reports.unsubscribe import make_token
from ettweb.rollouts.models import Rollout
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.reports.test_report_browser import shoot, watched
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

PASSWORD: Final = "pw-tour-1"
#: How long one page may take to draw (the machine may be busy; a page is usually < 1 s).
WAIT_MS: Final = 20_000

#: Routes that are not on the tour, by URL name (a namespace ends in ``:``), each with why.
EXCLUDED: Final[dict[str, str]] = {
    "admin:": "Django's own admin pages (view-only model pages, its own templates); "
              "test_csp_browser.py loads the admin under the policy",
    "api-v1:": "JSON under /api/v1/, not pages; the API tests cover them and "
               "test_csp_browser.py loads its Swagger docs",
    "healthz": "JSON status for load balancers, no page",
    "metrics": "Prometheus text behind a bearer token, no page",
    "favicon": "a redirect to the static icon",
    "reports:preview-chart": "the preview's chart, a PNG not a page: decoded inside the "
                             "preview's frame on the reports:preview stop",
    "logout": "POST only (the header's log-out button); a GET answers 405",
    "sso:": "single sign-on's redirects to and from the identity provider (off here, a 404); "
            "tests/ettweb/sso/test_sso_browser.py walks them in Chromium with a provider",
}

#: Every chart block on the page, and whether plotly drew it (a plot div with its SVG).
DRAWN_JS: Final = """() => Array.from(document.querySelectorAll("script.ett-figure"))
    .map(block => {
        const div = document.getElementById(block.dataset.target);
        return !!(div && div.classList.contains('js-plotly-plot')
                  && div.querySelector('svg.main-svg'));
    }).every(Boolean)"""
#: Each drawn chart's id and its data points, counted over every trace (x, y, values, z:
#: whichever a trace type uses; null and NaN are no point).
POINTS_JS: Final = """() => Object.fromEntries(
    Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
        const count = v => (Array.isArray(v) || ArrayBuffer.isView(v))
            ? Array.from(v).flat().filter(x => x !== null && x !== undefined
                                        && !(typeof x === 'number' && isNaN(x))).length
            : 0;
        const traces = (gd._fullData || gd.data || [])
            .map(t => Math.max(count(t.x), count(t.y), count(t.values), count(t.z)));
        return [gd.id, traces];
    }))"""
#: What every chart draws, to tell whether a filter changed it.
DATA_JS: Final = """() => JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(gd => (gd._fullData || []).map(t => [t.name,
        Array.from(t.x || []), Array.from(t.y || []), Array.from(t.values || [])])))"""
#: The report preview's mail: loaded, and its frame fitted to it by static/ett/ett.js.
FRAME_FITTED_JS: Final = """() => Array.from(document.querySelectorAll('iframe[data-fit-height]'))
    .every(f => f.contentDocument && f.contentDocument.readyState === 'complete'
                && f.contentDocument.body && f.contentDocument.body.scrollHeight > 100
                && Math.abs(f.clientHeight - f.contentDocument.body.scrollHeight) <= 1)"""


# ------------------------------------------------------------------------------ the data

#: The rollout-impact fleet (Mar 8-12, model dlrm, cluster east): 6 jobs of each kind.
IMPACT_JOBS: Final = [(f"{team}-{kind}{n}", team) for n in range(6)
                      for team in ("ads", "feed") for kind in "ba"]


@dataclass(frozen=True)
class Scene:
    """What the fixture made, for the tour to fill path parameters and expect numbers."""

    job: str  # a job with a failure and a restart: every chart of the job page has data
    component: str
    rollout: int
    rollout_name: str
    unsubscribe_token: str
    jobs_by_team: dict[str, int]


@pytest.fixture
def scene(transactional_db: None) -> Scene:
    """A small fleet, rollouts, collectors and users: every page has something to show.

    * scoped_fleet's five jobs on Mar 2-5, 2026: teams ads and feed, models m1 and m2,
      clusters east and west, 1 to 16 GPUs, one failure and restart (restart tax, recovery);
    * the rollout tests' 24 jobs on Mar 8-12 (model dlrm), teams ads and feed either side of
      the *compile cache* rollout (Mar 10, scope team ads), so its impact is measured;
    * two more rollouts (feed's checkpointing, a fleet-wide scheduler one) for the list;
    * three collectors, one silent for 95 minutes, and two quarantined lines;
    * an admin (edit pages open) and another user's subscription for the unsubscribe page.

    All ORM work is here: none once the browser runs.
    """
    scoped_fleet.ingest()
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"ads-b{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ads-a{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
        events += day_job(f"feed-b{n}", 8 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
        events += day_job(f"feed-a{n}", 11 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
    store(events)
    # Rows of our own: a transactional test before this one flushes the seeded components.
    for name, team in (("pt2_compiler", "ads"), ("checkpointing", "infra")):
        Component.objects.update_or_create(name=name, defaults={"owner_team": team})
    measured = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                      at=datetime(2026, 3, 10, 12, tzinfo=UTC),
                                      scope={"teams": ["ads"]}, notes="Shared inductor cache.")
    Rollout.objects.create(name="async checkpoint", component="checkpointing",
                           at=datetime(2026, 3, 4, 12, tzinfo=UTC), scope={"teams": ["feed"]})
    Rollout.objects.create(name="gang scheduling", component="scheduler",
                           at=datetime(2026, 3, 6, 12, tzinfo=UTC))
    # Detected changes (beat finds them on months of days; stored here as it stores them):
    # one no rollout explains, one the feed checkpointing rollout does.
    for component, team, day, before, after in (
            ("pt2_compiler", "ads", date(2026, 3, 4), 12.5, 6.0),
            ("checkpointing", "feed", date(2026, 3, 5), 9.0, 4.5)):
        Change.objects.create(component=component, team=team, day=day,
                              before_lost_pct=before, after_lost_pct=after,
                              detected_at=timezone.now())

    for source, minutes_ago, backlog in (("node-a", 0.2, 12), ("node-b", 0.4, 0),
                                         ("node-gone", 95, 4000)):
        CollectorHealth.objects.create(source=source, backlog_events=backlog,
                                       shipped_events=10_000, dropped_events=2)
        CollectorHealth.objects.filter(source=source).update(
            updated_at=timezone.now() - timedelta(minutes=minutes_ago))
    ingest_batch([json.dumps({"v": 1, "id": "bad-1", "job": "j", "kind": "mark"}), "{oops"],
                 "node-a", None)

    admin = User.objects.create_user("boss", email="boss@example.com", password=PASSWORD)
    set_role(admin, ADMIN)
    leaver = User.objects.create_user("leaver", email="leaver@example.com")
    subscription = Subscription.objects.create(user=leaver, email=leaver.email)

    teams: dict[str, int] = {}
    for team, *_ in scoped_fleet.JOBS.values():
        teams[team] = teams.get(team, 0) + 1
    for _, team in IMPACT_JOBS:
        teams[team] = teams.get(team, 0) + 1
    return Scene(job="ads-m2-west", component="pt2_compiler", rollout=measured.pk,
                 rollout_name=measured.name, unsubscribe_token=make_token(subscription.pk),
                 jobs_by_team=teams)


# ------------------------------------------------------------------------------ the tour


@dataclass(frozen=True)
class Filter:
    """One filter to change on a page's GET form, and what must change with it.

    ``fill`` sets inputs (or selects) by selector; after submitting, the URL's query must
    hold ``param=value`` and the text of every ``changes`` selector (and the charts' data,
    where the page draws any) must differ from before. ``expect`` pins texts whose new value
    the fixture tells (selector -> text).
    """

    fill: tuple[tuple[str, str], ...]
    param: str
    value: str
    changes: tuple[str, ...]
    expect: Callable[[Scene], dict[str, str]] = field(default=lambda scene: {})


@dataclass(frozen=True)
class Stop:
    """One page of the tour: its path (parameters filled from the scene), what shows it is
    rendered with its data, the charts it must draw, and its filter, if it has a form."""

    path: Callable[[Scene], str]
    ready: str
    charts: tuple[str, ...] = ()
    filter: Filter | None = None
    check: Callable[[Page, Scene], None] | None = None


def _team(team: str) -> tuple[tuple[str, str], ...]:
    return (("#id_team", team),)


def _is_editable(page: Page, scene: Scene) -> None:
    """An admin gets the phase map's move forms."""
    assert page.locator("#phase-map select[name=component]").count() >= 1


def _has_rollout(page: Page, scene: Scene) -> None:
    """The edit form opens on the rollout, not an empty form."""
    assert page.input_value("#id_name") == scene.rollout_name


def _subject(page: Page, scene: Scene) -> None:
    """The preview shows a week with data: its mail's chart decoded."""
    chart = page.frame_locator("iframe.email-preview").locator(
        "img[src*='/reports/preview/chart.png']")
    assert chart.evaluate("img => img.decode().then(() => img.naturalWidth)") > 300


def _marks_changes(page: Page, scene: Scene) -> None:
    """The lost-share chart marks the component's detected change, said in its legend."""
    assert "1 detected change" in (page.text_content("#change-legend") or "")
    drawn = page.evaluate("""() => document.getElementById('component-share')._fullData
        .filter(t => t.meta === 'changes').map(t => t.x.length)""")
    assert drawn == [1]


def _offers_to_record(page: Page, scene: Scene) -> None:
    """An admin may record the rollout behind the unrecorded change; the explained one
    links its rollout."""
    assert page.locator("#changes tr.unrecorded a.record-link").count() == 1
    assert page.locator("#changes tr.recorded a[href^='/rollouts/']").count() == 1


def _unsubscribe(page: Page, scene: Scene) -> None:
    assert "leaver@example.com" in (page.text_content("section.card") or "")


#: The tour, by URL name, in the order a user might take it (login first: it logs in).
TOUR: Final[dict[str, Stop]] = {
    "login": Stop(lambda s: "/accounts/login/?next=/", "#id_username"),
    "dashboard:jobs": Stop(
        lambda s: "/", "#jobs-table", ("fleet-lost",),
        Filter(_team("ads"), "team", "ads", ("#jobs-total", "#jobs-table"),
               lambda s: {"#jobs-total": str(s.jobs_by_team["ads"])})),
    "dashboard:fleet": Stop(
        lambda s: "/fleet/", "#ett-trend",
        ("ett-trend", "lost-by-component", "lost-over-time", "restart-tax", "lifecycle"),
        Filter(_team("ads"), "team", "ads", ("#range-ett", "#range-lost", "#top-jobs"))),
    "dashboard:job": Stop(lambda s: reverse("dashboard:job", args=[s.job]), "#phase-timeline",
                          ("phase-timeline", "lost-waterfall", "recovery-parts")),
    "components:index": Stop(
        lambda s: "/components/", "#components", (),
        Filter(_team("ads"), "team", "ads", ("#fleet-lost-hours", "#components"))),
    "components:detail": Stop(
        lambda s: reverse("components:detail", args=[s.component]), "#component-lost",
        ("component-lost", "component-share"),
        Filter(_team("ads"), "team", "ads", ("#component-lost-hours", "#top-jobs")),
        check=_marks_changes),
    "components:phases": Stop(lambda s: reverse("components:phases", args=[s.component]),
                              "#phase-map", check=_is_editable),
    "rollouts:list": Stop(
        lambda s: "/rollouts/", "#rollouts", (),
        Filter(_team("feed"), "team", "feed", ("#rollouts",))),
    "changes:list": Stop(
        lambda s: "/changes/", "#changes", (),
        Filter(_team("feed"), "team", "feed", ("#change-counts", "#changes")),
        check=_offers_to_record),
    "rollouts:create": Stop(lambda s: "/rollouts/new/", "#rollout-form"),
    "rollouts:detail": Stop(
        lambda s: f"/rollouts/{s.rollout}/?window=2", "#impact-trend",
        ("impact-trend", "change-intervals", "job-distributions", "component-shifts"),
        Filter((("#id_window", "1"),), "window", "1", ("#window-form",))),
    "rollouts:edit": Stop(lambda s: f"/rollouts/{s.rollout}/edit/", "#rollout-form",
                          check=_has_rollout),
    "dashboard:collectors": Stop(
        lambda s: "/collectors/", "#collectors-table", (),
        Filter((("#id_silent_after", "120"),), "silent_after", "120", ("#collectors-silent",),
               lambda s: {"#collectors-silent": "0"})),
    "reports:settings": Stop(lambda s: "/reports/settings/", "form.report-settings"),
    "reports:preview": Stop(
        lambda s: "/reports/preview/?week=2026-W11", "iframe.email-preview", (),
        Filter((("#week", "2026-W10"),), "week", "2026-W10", ("b.subject",)), check=_subject),
    "reports:unsubscribe": Stop(
        lambda s: reverse("reports:unsubscribe", args=[s.unsubscribe_token]),
        "section.card button[type=submit]", check=_unsubscribe),
    "password_change": Stop(lambda s: "/accounts/password_change/", "#id_old_password"),
    "password_change_done": Stop(lambda s: "/accounts/password_change/done/", "#content"),
}


def _names(patterns: list[URLPattern | URLResolver], namespace: str = "",
           prefix: str = "") -> Iterator[str]:
    """Every URL pattern's qualified name (its regex where it has none, still under its
    namespace), however deeply included: the routes the tour must cover."""
    for item in patterns:
        regex = prefix + item.pattern.regex.pattern.lstrip("^")
        if isinstance(item, URLResolver):
            inner = f"{namespace}{item.namespace}:" if item.namespace else namespace
            yield from _names(item.url_patterns, inner, regex)
        else:
            yield f"{namespace}{item.name or regex}"


def untoured() -> list[str]:
    """The routes neither on the tour nor excluded with a reason (should be none)."""
    return [name for name in dict.fromkeys(_names(get_resolver().url_patterns))
            if name not in TOUR and name not in EXCLUDED
            and not any(name.startswith(ns) for ns in EXCLUDED if ns.endswith(":"))]


def test_the_tour_covers_every_route() -> None:
    """Fast, and without Chromium: a new page fails here with its name until it joins the
    tour (or :data:`EXCLUDED` gives the reason it is not a page). A tour stop or exclusion
    whose route is gone fails too, so neither list outlives its pages."""
    assert untoured() == [], "pages not on the browser tour: add them to TOUR"
    names = set(_names(get_resolver().url_patterns))
    stale = [name for name in [*TOUR, *EXCLUDED] if name not in names
             and not any(n.startswith(name) for n in names if name.endswith(":"))]
    assert stale == [], "TOUR/EXCLUDED name routes that no longer exist"


def _settle(page: Page, stop: Stop) -> None:
    """Wait until the page shows its data: its marker element, every chart drawn, and a
    fitted mail frame where it has one."""
    page.wait_for_load_state("load")
    page.wait_for_selector(stop.ready, state="attached", timeout=WAIT_MS)
    page.wait_for_function(DRAWN_JS, timeout=WAIT_MS)
    page.wait_for_function(FRAME_FITTED_JS, timeout=WAIT_MS)


def _check_charts(page: Page, stop: Stop) -> None:
    """The page's own charts are there, and every chart on it has a trace with points."""
    points: dict[str, list[int]] = page.evaluate(POINTS_JS)
    missing = [chart for chart in stop.charts if chart not in points]
    assert missing == [], f"charts not drawn: {missing} (drawn: {sorted(points)})"
    empty = [chart for chart, traces in points.items() if not any(traces)]
    assert empty == [], f"charts without data points: {empty}"


def _texts(page: Page, selectors: tuple[str, ...]) -> dict[str, str]:
    return {selector: page.inner_text(selector, timeout=WAIT_MS) for selector in selectors}


def _refilter(page: Page, stop: Stop, scene: Scene, name: str, tmp_path: Path) -> None:
    """Change the stop's filter, submit, and see the URL and the numbers follow."""
    assert stop.filter is not None
    spec = stop.filter
    before, charts_before = _texts(page, spec.changes), page.evaluate(DATA_JS)
    form = page.locator("form[method=get]")
    for selector, value in spec.fill:
        target = form.locator(selector)
        if target.evaluate("e => e.tagName") == "SELECT":
            target.select_option(value)
        else:
            target.fill(value)
    with page.expect_navigation(timeout=WAIT_MS):
        form.locator("button[type=submit]").click()
    _settle(page, stop)
    query = parse_qs(urlsplit(page.url).query)
    assert query.get(spec.param) == [spec.value], f"{spec.param}={spec.value} not in {page.url}"
    after = _texts(page, spec.changes)
    unchanged = [selector for selector in spec.changes if after[selector] == before[selector]]
    assert unchanged == [], f"{spec.param}={spec.value} changed nothing in {unchanged}"
    if charts_before != "[]":
        assert page.evaluate(DATA_JS) != charts_before, "the charts did not change"
    for selector, text in spec.expect(scene).items():
        assert page.inner_text(selector) == text, selector
    _check_charts(page, stop)
    shoot(page, tmp_path, f"page-{name.replace(':', '-')}-filtered.png")


def _visit(page: Page, live_server: LiveServer, stop: Stop, scene: Scene, name: str,
           tmp_path: Path) -> None:
    """One page: loaded, drawn with data, shot, its filter tried."""
    page.goto(f"{live_server.url}{stop.path(scene)}")
    _settle(page, stop)
    _check_charts(page, stop)
    if stop.check is not None:
        stop.check(page, scene)
    shoot(page, tmp_path, f"page-{name.replace(':', '-')}.png")
    forms = page.locator("form[method=get]").count()
    if stop.filter is None:
        assert forms == 0, "a GET filter form, but no Filter on its tour stop"
    else:
        assert forms == 1, f"{forms} GET forms where the tour expects one"
        _refilter(page, stop, scene, name, tmp_path)


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_every_page_in_a_browser(scene: Scene, live_server: LiveServer, browser: Browser,
                                 tmp_path: Path) -> None:
    """Log in through the form, then every page of the resolver in one browser. A page's
    failure is noted and the tour goes on, so one run names every broken page."""
    assert untoured() == [], "pages not on the browser tour: add them to TOUR"
    problems: list[str] = []
    external: list[str] = []
    page = watched(browser, live_server, problems, external)
    failures: dict[str, str] = {}
    toured: list[str] = []
    for name, stop in TOUR.items():
        seen = len(problems)
        try:
            _visit(page, live_server, stop, scene, name, tmp_path)
            if name == "login":
                page.fill("#id_username", "boss")
                page.fill("#id_password", PASSWORD)
                with page.expect_navigation(timeout=WAIT_MS):
                    page.click("button[type=submit]")
                assert urlsplit(page.url).path == "/", f"not logged in: {page.url}"
        except (AssertionError, PlaywrightError) as exc:
            failures[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if len(problems) > seen:
            failures[name] = "; ".join([failures.get(name, ""), *problems[seen:]]).lstrip("; ")
        toured.append(name)
    assert failures == {}, "\n".join(f"{name} ({quote(TOUR[name].path(scene))}): {why}"
                                     for name, why in failures.items())
    assert external == [], "requests left the machine"
    assert toured == list(TOUR)
    assert (tmp_path / "page-dashboard-fleet.png").stat().st_size > 10_000
