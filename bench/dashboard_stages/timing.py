"""Filling a target's requests and timing them, in-process, as one logged-in user.

Why in-process through ``django.test.Client``: the target is server time — the whole
middleware stack, view, query and template — with no network in the number;
``time.perf_counter()`` is taken around each request. Path parameters come from the catalog
by name; query parameters from the OpenAPI document or the page's own forms, each optional
one drawn half the time, and a page's same-page links (sorts, pages) a quarter of the time.
The first request of each target is not timed (imports, template compilation) and decides
how it is authenticated: a session, or a bearer token where the session is refused.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, urlencode

from bench.dashboard_stages.catalog import Filler
from bench.dashboard_stages.discovery import OPENAPI_PATH_PARAM, ROUTE_PARAM, Param, Target
from bench.dashboard_stages.forms import PageForms

BENCH_USER: Final = "bench-dashboard"
#: Timings of the representative request the raw path is compared on (their median).
REPRESENTATIVE_REPEATS: Final = 5
#: The representative request of a page that takes a range covers the last days that hold data.
REPRESENTATIVE_DAYS: Final = 30


def bench_client() -> tuple[Any, Any, str]:
    """A client logged in as the bench's superuser (every page is open to it), the user, and
    an API token of its own."""
    from django.contrib.auth.models import User
    from django.test import Client

    from ettweb.access.tokens import issue_token

    user, _ = User.objects.get_or_create(username=BENCH_USER,
                                         defaults={"is_staff": True, "is_superuser": True})
    client = Client(raise_request_exception=False)  # a 500 is a measured error, not a crash
    client.force_login(user)
    return client, user, issue_token(user, "bench.dashboard")


class Unfillable(Exception):
    """A parameter the bench has no value for: the target is reported as unmeasured."""


def fill_path(target: Target, filler: Filler, rng: random.Random,
              fixed: dict[str, str] | None = None) -> str:
    """The target's path with its parameters filled (``fixed`` values first)."""
    route = target.key.removeprefix("GET ")
    values = {}
    for name in target.path_params:
        value = filler.path_value(route, name, rng)
        if value is None:
            raise Unfillable(f"no value for path parameter {name!r}")
        values[name] = quote((fixed or {}).get(name) or value, safe="")
    if target.kind == "endpoint":
        return OPENAPI_PATH_PARAM.sub(lambda m: values[m.group(1)], route)
    return ROUTE_PARAM.sub(lambda m: values[m.group(2)], route)


def query_for(params: Sequence[Param], filler: Filler, rng: random.Random,
              links: Sequence[dict[str, str]] = ()) -> dict[str, str]:
    """Query values for one request: required ones always, each optional one half the time;
    a range's two ends are drawn together (both seven times in ten, one end alone one time
    in ten each, neither otherwise), so ``date_from`` is never after ``date_to``.

    A hidden input (the page's current sort, say) is sent as the page set it, or varied
    with the values the page's own links give that name: never the filler's, since what
    one page accepts for a name (``sort``) is not what another does."""
    names = {p.name for p in params}
    query: dict[str, str] = {}
    drawn: set[str] = set()
    if {"date_from", "date_to"} <= names:
        drawn = {"date_from", "date_to"}
        required = any(p.required for p in params if p.name in drawn)
        low, high = filler.date_range(rng)
        roll = rng.random()
        if required or roll < 0.7:
            query["date_from"], query["date_to"] = low, high
        elif roll < 0.8:
            query["date_from"] = low
        elif roll < 0.9:
            query["date_to"] = high
    for param in params:
        if param.name in query or param.name in drawn:
            continue
        if param.value is not None:
            offered = sorted({link[param.name] for link in links if param.name in link})
            query[param.name] = (rng.choice(offered) if offered and rng.random() < 0.5
                                 else param.value)
        elif param.required or rng.random() < 0.5:
            value = _value(param, filler, rng)
            if value is None and param.required:
                raise Unfillable(f"no value for required parameter {param.name!r}")
            if value is not None:
                query[param.name] = value
    return query


def _value(param: Param, filler: Filler, rng: random.Random) -> str | None:
    known = filler.value(param.name, rng)
    if known is not None and (not param.choices or known in param.choices):
        return known
    if param.choices:
        return rng.choice(param.choices)
    if param.kind == "date":
        return filler.day(rng)
    if param.kind == "int" and param.minimum is not None:
        top = param.maximum if param.maximum is not None else param.minimum + 100
        return str(rng.randint(param.minimum, min(top, param.minimum + 100)))
    if param.kind == "bool":
        return rng.choice(("true", "false"))
    return None


def _url(path: str, query: dict[str, str]) -> str:
    query = {k: v for k, v in query.items() if v != ""}
    return f"{path}?{urlencode(query)}" if query else path


@dataclass
class Timing:
    samples_ms: list[float] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    sample_urls: list[str] = field(default_factory=list)


def timed_get(client: Any, url: str, headers: dict[str, str]) -> tuple[float, Any]:
    began = time.perf_counter()
    response = client.get(url, headers=headers)
    return 1000.0 * (time.perf_counter() - began), response


class Measurer:
    """Times targets with one logged-in client (a superuser: every page is open to it)."""

    def __init__(self, client: Any, token: str, filler: Filler, seed: int) -> None:
        self.client, self.filler, self.seed = client, filler, seed
        self.bearer = {"Authorization": f"Bearer {token}"}

    def prepare(self, target: Target) -> str | None:
        """First request (not timed: imports, templates): auth, forms, links; or why not."""
        rng = random.Random(f"{self.seed}:{target.key}:prepare")
        try:
            path = fill_path(target, self.filler, rng)
            url = path if target.kind == "page" else self.next_url(target, rng)
        except Unfillable as exc:
            return str(exc)
        if target.kind == "endpoint":
            target.headers, target.auth = self.bearer, "bearer"
        response = self.client.get(url, headers=target.headers)
        if response.status_code in (401, 403) and target.kind == "page":
            target.headers, target.auth = self.bearer, "bearer"
            response = self.client.get(url, headers=target.headers)
        if response.status_code >= 400:
            return f"GET {url} answered {response.status_code}"
        if target.kind == "page" and "html" in response.get("Content-Type", ""):
            forms = PageForms(path)
            forms.feed(response.content.decode("utf-8", errors="replace"))
            target.params, target.links = forms.resolved(), forms.links
        return None

    def next_url(self, target: Target, rng: random.Random) -> str:
        path = fill_path(target, self.filler, rng)
        if target.links and rng.random() < 0.25:
            return _url(path, rng.choice(target.links))
        return _url(path, query_for(target.params, self.filler, rng, target.links))

    def measure(self, target: Target, repeats: int) -> Timing:
        rng = random.Random(f"{self.seed}:{target.key}")
        timing = Timing()
        for _ in range(repeats):
            url = self.next_url(target, rng)
            ms, response = timed_get(self.client, url, target.headers)
            if response.status_code >= 400:
                if len(timing.errors) < 3:
                    timing.errors.append({"url": url, "status": response.status_code,
                                          "body": response.content[:200].decode(errors="replace")})
                continue
            timing.samples_ms.append(ms)
            if len(timing.sample_urls) < 3:
                timing.sample_urls.append(url)
        return timing

    def representative(self, target: Target) -> tuple[str, dict[str, str]]:
        """The request the raw path is compared on, and its parameters (path and query)."""
        c = self.filler.catalog
        fixed: dict[str, str] = {}
        if c.biggest_job:
            fixed["job"] = fixed["job_id"] = c.biggest_job
        if c.rollouts:
            fixed["rollout_id"] = str(c.rollouts[len(c.rollouts) // 2][0])
        if "checkpointing" in c.components:
            fixed["name"] = fixed["component"] = "checkpointing"
        path = fill_path(target, self.filler, random.Random(0), fixed)
        names = {p.name for p in target.params}
        query: dict[str, str] = {}
        if {"date_from", "date_to"} <= names:
            low, high = c.last_range(REPRESENTATIVE_DAYS)
            query = {"date_from": low.isoformat(), "date_to": high.isoformat()}
        if "week" in names:
            query["week"] = c.weeks[-1]
        rng = random.Random(0)
        for param in target.params:
            if param.required and param.name not in query:
                query[param.name] = _value(param, self.filler, rng) or ""
        chosen = {k: v for k, v in fixed.items() if k in target.path_params}
        return _url(path, query), {**chosen, **query}

    def stored_ms(self, target: Target, url: str) -> float:
        return statistics.median(timed_get(self.client, url, target.headers)[0]
                                 for _ in range(REPRESENTATIVE_REPEATS))
