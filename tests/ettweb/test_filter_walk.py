"""Every endpoint, every filter it documents: the API's numbers equal the page's for the same
query string, the answer repeats what it applied, and the filter changes the answer (issue 27,
item 1). Unknown parameters are a 400 naming them, on pages and in the API.

Why a walk and not one test per endpoint: ``/api/v1/fleet/summary?team=ads`` once answered the
whole fleet's numbers while the fleet page filtered, and a misspelt ``teem=ads`` answered 200.
The documented parameters are read from the OpenAPI document, so an endpoint or a filter added
later fails here until this walk knows it, and a dropped filter fails on "changes the answer".
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any, Final

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from ettweb.access.tokens import issue_token
from ettweb.api.v1 import api
from ettweb.changes.models import Change
from ettweb.pages.parameters import TAKES
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.dashboard.scoped_fleet import MARCH_PARAMS

pytestmark = pytest.mark.django_db

#: A value for each filter that keeps some of the fixture's jobs and drops ``ads-m2-west``,
#: the one job that fails (so failures, lost time and ETT% all move).
FILTERS: Final = {"team": "feed", "model": "m1", "cluster": "east", "gpus": "2-8",
                  "date_from": "2026-03-04", "date_to": "2026-03-02", "q": "feed",
                  "status": "failed", "component": "checkpointing"}
#: Parameters that shape an answer rather than choose what it counts.
OPTIONS: Final = frozenset({"interval", "group_by", "compare", "limit", "top", "sort", "page",
                            "page_size"})
#: The range every request starts from (the fixture's March); a date filter replaces one end.
BASE: Final = MARCH_PARAMS

Numbers = Callable[[Any], Any]


def _subset(page: dict[str, Any], body: dict[str, Any]) -> None:
    """Every field the page's result holds is in the API's answer, equal."""
    for key, value in page.items():
        assert body[key] == value, key


def _same(result: str) -> Callable[[dict[str, Any], dict[str, Any]], Any]:
    """Compare the page context's ``result`` (its ``as_api()``) with the API body."""
    def compare(context: dict[str, Any], body: dict[str, Any]) -> Any:
        _subset(context[result].as_api(), body)
        return context[result].as_api()
    return compare


def _summary(context: dict[str, Any], body: dict[str, Any]) -> Any:
    trend = context["trend"]
    numbers = (trend.wall_gpu_s, trend.productive_gpu_s, trend.ett_pct,
               context["lifecycle"].failures)
    assert (body["wall_gpu_s"], body["productive_gpu_s"], body["ett_pct"],
            body["failures"]) == pytest.approx(numbers)
    assert body["lost_by_component_gpu_s"] == pytest.approx(
        {c.component: c.gpu_s for c in context["lost"].components})
    return numbers


def _lost_trend(context: dict[str, Any], body: dict[str, Any]) -> Any:
    page = {c.component: c.gpu_s for c in context["lost"].components}
    api_total = {name: sum(values) for name, values in body["gpu_s"].items()}
    assert api_total == pytest.approx(page)
    return page


#: API path -> (its page, how the numbers are compared); the compare returns the page's
#: numbers, which the filter must change.
WALK: Final[dict[str, tuple[str, Callable[[dict[str, Any], dict[str, Any]], Any]]]] = {
    "/api/v1/fleet/summary": ("/fleet/", _summary),
    "/api/v1/fleet/trend": ("/fleet/", _same("trend")),
    "/api/v1/fleet/headline": ("/fleet/", _same("headline")),
    "/api/v1/fleet/lost-by-component": ("/fleet/", _same("lost")),
    "/api/v1/fleet/lost-trend": ("/fleet/", _lost_trend),
    "/api/v1/fleet/lifecycle": ("/fleet/", _same("lifecycle")),
    "/api/v1/fleet/top-jobs": ("/fleet/", _same("top")),
    "/api/v1/components": ("/components/", _same("result")),
    "/api/v1/components/pt2_compiler": ("/components/pt2_compiler/", _same("c")),
    "/api/v1/jobs": ("/", _same("fleet")),
    "/api/v1/changes": ("/changes/", _same("result")),
}
#: GET operations with no page twin to walk, and why.
NOT_WALKED: Final = {
    "/api/v1/rollouts": "a list of records (component and limit), not numbers of a range",
    "/api/v1/rollouts/{rollout_id}": "one record",
    "/api/v1/rollouts/{rollout_id}/impact": "one rollout's window, walked by its own tests",
    "/api/v1/reports/weekly": "one ISO week, equal to the e-mail (tests/ettweb/reports)",
    "/api/v1/collectors": "collector health, not job numbers",
    "/api/v1/jobs/{job}": "one job",
}


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    schema: dict[str, Any] = api.get_openapi_schema(path_prefix="/api/v1/")
    return schema


def documented(openapi: dict[str, Any], path: str) -> set[str]:
    """The query parameters the OpenAPI document lists for ``GET path``."""
    template = "/api/v1/components/{name}" if path.startswith("/api/v1/components/") else path
    operation = openapi["paths"][template]["get"]
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}


@pytest.fixture
def fleet() -> None:
    scoped_fleet.ingest()
    # Two detected changes, so the changes page and API have something each filter moves.
    at = datetime(2026, 3, 6, tzinfo=UTC)
    Change.objects.create(component="checkpointing", team="feed", day=date(2026, 3, 2),
                          before_lost_pct=1.0, after_lost_pct=4.0, detected_at=at)
    Change.objects.create(component="pt2_compiler", team="ads", day=date(2026, 3, 4),
                          before_lost_pct=3.0, after_lost_pct=1.0, detected_at=at)


@pytest.fixture
def viewer() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer"))
    return client


@pytest.fixture
def auth() -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {issue_token(User.objects.create_user('r'), 'w')}"}


def test_every_get_operation_is_walked_or_says_why(openapi: dict[str, Any]) -> None:
    gets = {f"/api/v1{p}" if not p.startswith("/api/v1") else p
            for p, methods in openapi["paths"].items() if "get" in methods}
    walked = {"/api/v1/components/{name}" if p == "/api/v1/components/pt2_compiler" else p
              for p in WALK}
    assert gets == walked | set(NOT_WALKED)


@pytest.mark.parametrize("path", list(WALK))
def test_documented_parameters_are_filters_or_options(openapi: dict[str, Any],
                                                      path: str) -> None:
    unknown = documented(openapi, path) - set(FILTERS) - OPTIONS
    assert not unknown, f"{path}: classify {sorted(unknown)} as a filter or an option"


def _ask(client: Client, path: str, params: dict[str, str], **extra: str) -> Any:
    response = client.get(path, params, **extra)
    assert response.status_code == 200, (path, params, response.content[:300])
    return response


@pytest.mark.parametrize("path", list(WALK))
@pytest.mark.slow
def test_each_filter_is_applied_echoed_and_equal_to_the_page(
        fleet: None, viewer: Client, auth: dict[str, str], openapi: dict[str, Any],
        path: str) -> None:
    page_path, compare = WALK[path]
    unfiltered = compare(_ask(viewer, page_path, BASE).context,
                         _ask(Client(), path, BASE, **auth).json())
    filters = sorted(documented(openapi, path) & set(FILTERS))
    assert filters, f"{path} documents no filter"
    for name in filters:
        params = {**BASE, name: FILTERS[name]}
        body = _ask(Client(), path, params, **auth).json()
        page = _ask(viewer, page_path, params)
        numbers = compare(page.context, body)
        assert numbers != unfiltered, f"{path}: {name}={FILTERS[name]} changed nothing"
        echoed = body["date_from" if name == "date_from" else "date_to"] if name.startswith(
            "date_") else body["filter"][name]
        assert echoed == FILTERS[name], f"{path} does not repeat {name}"


@pytest.mark.parametrize("path", [*WALK, "/api/v1/rollouts", "/api/v1/reports/weekly",
                                  "/api/v1/collectors", "/api/v1/jobs/ads-m1-east"])
def test_the_api_refuses_unknown_parameters_naming_them(
        fleet: None, auth: dict[str, str], path: str) -> None:
    response = Client().get(path, {"teem": "ads", "week": "2026-W10"}
                            if path.endswith("weekly") else {"teem": "ads"}, **auth)
    assert response.status_code == 400
    assert response.json()["error"].startswith("teem: unknown parameter (this endpoint takes")


def _page_views() -> list[tuple[str, Any]]:
    """Every URL pattern outside the admin and the API, with its view."""
    found: list[tuple[str, Any]] = []

    def walk(patterns: list[URLResolver | URLPattern], prefix: str) -> None:
        for item in patterns:
            route = prefix + str(item.pattern)
            if isinstance(item, URLResolver):
                if route.startswith(("admin/", "api/")):
                    continue
                walk(item.url_patterns, route)
            else:
                found.append((route, item.callback))

    walk(get_resolver().url_patterns, "")
    return found


#: Pages whose parameters another party defines, and why they take any.
TAKES_ANY: Final = {
    "accounts/sso/callback/": "the identity provider's redirect: OAuth 2.0 (RFC 6749, 4.1.2) "
                              "has a client ignore response parameters it does not know",
}


def test_every_page_says_which_parameters_it_takes() -> None:
    undeclared = [route for route, view in _page_views()
                  if not hasattr(view, TAKES) and route not in TAKES_ANY]
    assert not undeclared


@pytest.mark.parametrize(("path", "known"), [
    ("/", "team"), ("/fleet/", "team"), ("/components/", "team"),
    ("/components/pt2_compiler/", "team"), ("/changes/", "team"), ("/rollouts/", "team"),
    ("/collectors/", "source"), ("/jobs/ads-m1-east/", "lanes_at"),
    ("/reports/preview/", "week"), ("/healthz", None)])
def test_pages_refuse_unknown_parameters_naming_them(fleet: None, viewer: Client, path: str,
                                                     known: str | None) -> None:
    params = {"teem": "ads"}
    if known is not None:
        params[known] = {"lanes_at": "0", "week": "2026-W10"}.get(known, "feed")
    response = viewer.get(path, params)
    assert response.status_code == 400
    text = response.content.decode()
    assert text.startswith("bad parameters: teem: unknown parameter (this page takes"), text
    if known is not None:
        assert known in text.split("(")[1]  # named among what the page takes, not refused


def test_login_keeps_next_and_refuses_the_rest(client: Client) -> None:
    assert client.get("/accounts/login/", {"next": "/fleet/"}).status_code == 200
    refused = client.get("/accounts/login/", {"nxt": "/fleet/"})
    assert refused.status_code == 400 and b"nxt: unknown parameter" in refused.content


@pytest.mark.slow
def test_every_link_on_every_page_is_taken(fleet: None, admin_client: Client) -> None:
    """A page's links and filter forms carry only what their target takes: follow every
    in-site link from the main pages (an admin sees every edit link), submit every GET form
    as it stands, and none may answer 400 or 500."""
    from ettweb.rollouts.models import Rollout

    Rollout.objects.create(name="async ckpt", component="checkpointing",
                           at=datetime(2026, 3, 3, 12, tzinfo=UTC), scope={"teams": ["feed"]})
    queue = ["/", "/fleet/", "/components/", "/rollouts/", "/changes/", "/collectors/",
             "/reports/settings/", "/reports/preview/"]
    seen: set[str] = set(queue)
    forms = 0
    while queue and len(seen) < 400:
        url = queue.pop(0)
        response = admin_client.get(url)
        assert response.status_code in (200, 302), (url, response.content[:300])
        if "text/html" not in response.get("Content-Type", ""):
            continue
        text = response.content.decode()
        for form in re.findall(r'<form method="get".*?</form>', text, flags=re.S):
            names = set(re.findall(r'name="([^"]+)"', form))
            submitted = admin_client.get(url.split("?")[0], dict.fromkeys(names, ""))
            assert submitted.status_code == 200, (url, sorted(names), submitted.content[:300])
            forms += 1
        for link in re.findall(r'href="(/[^"#]*)"', text):
            link = html.unescape(link)
            if link.startswith(("/static/", "/admin/", "/accounts/logout")) or link in seen:
                continue
            seen.add(link)
            queue.append(link)
    assert forms > 10 and len(seen) > 30  # the walk reached the job, component and rollout pages
    assert any(u.startswith("/jobs/") for u in seen) and any(
        u.startswith("/rollouts/1") or u.startswith("/rollouts/new") for u in seen)
