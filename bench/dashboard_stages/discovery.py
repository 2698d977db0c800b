"""Every page and API endpoint the bench times, found rather than listed.

Why found: a page or endpoint added later is timed without anyone editing the bench. Pages
are every URL pattern of Django's resolver (outside ``admin/`` and ``accounts/``, which are
Django's own pages, listed as excluded); endpoints are every GET of the OpenAPI document,
with its query parameters. A route the bench cannot fill is listed under ``unmeasured``
with the reason, never skipped silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

#: Django's own pages, not the dashboard: not measured, listed as excluded.
EXCLUDED_PREFIXES: Final = {
    "admin/": "Django admin (model pages, not the dashboard)",
    "accounts/": "Django's login and password forms"}
#: A path parameter of a Django route (``<path:job>``) and of an OpenAPI path (``{job}``).
ROUTE_PARAM: Final = re.compile(r"<(?:(\w+):)?(\w+)>")
OPENAPI_PATH_PARAM: Final = re.compile(r"{(\w+)}")


@dataclass(frozen=True)
class Param:
    """One query parameter: from the OpenAPI document, or from a page's GET form."""

    name: str
    required: bool = False
    kind: str = "str"  # str, int, date, bool
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    value: str | None = None  # a hidden input's fixed value


@dataclass
class Target:
    """A page or endpoint to time: its route, how to fill it, what it answered."""

    kind: str  # "page" or "endpoint"
    key: str  # the route ("/jobs/<path:job>/") or "GET /api/v1/..."
    name: str  # URL name, or the operation's
    path_params: tuple[str, ...]
    params: list[Param] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    auth: str = "session"


def resolver_routes() -> list[tuple[str, str]]:
    """Every (route, URL name) of the root URLconf, routes as written (``jobs/<path:job>/``);
    a regex route keeps its regex (it cannot be filled: reported as unmeasured)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    found: list[tuple[str, str]] = []

    def walk(patterns: Iterable[Any], prefix: str, namespace: str) -> None:
        for item in patterns:
            route = prefix + str(item.pattern)
            if isinstance(item, URLResolver):
                inner = f"{namespace}{item.namespace}:" if item.namespace else namespace
                walk(item.url_patterns, route, inner)
            elif isinstance(item, URLPattern):
                found.append((route, f"{namespace}{item.name or item.lookup_str}"))

    walk(get_resolver().url_patterns, "", "")
    return found


def discover_pages(api_prefix: str = "api/v1/") -> tuple[list[Target], list[dict[str, Any]],
                                                         list[dict[str, str]]]:
    """Pages to time, pages excluded (with why) and routes that cannot be filled (with why).

    The API's endpoints come from its OpenAPI document instead (``discover_endpoints``); its
    documentation pages (the document itself and the docs page) are pages here.
    """
    targets: list[Target] = []
    excluded: list[dict[str, Any]] = []
    unmeasured: list[dict[str, str]] = []
    for route, name in resolver_routes():
        reason = next((why for prefix, why in EXCLUDED_PREFIXES.items()
                       if route.startswith(prefix)), None)
        if reason:
            prefix = "/" + route.split("/", 1)[0] + "/"
            group = next((g for g in excluded if g["prefix"] == prefix), None)
            if group is None:
                excluded.append({"prefix": prefix, "routes": 0, "reason": reason})
                group = excluded[-1]
            group["routes"] += 1
            continue
        if route.startswith(api_prefix) and not name.endswith(("openapi-json", "openapi-view")):
            continue  # an endpoint: from the OpenAPI document
        if route.startswith("^") or "(?" in route:
            unmeasured.append({"route": route, "name": name, "reason": "a regex route"})
            continue
        params = tuple(match.group(2) for match in ROUTE_PARAM.finditer(route))
        targets.append(Target("page", "/" + route, name, params))
    return targets, excluded, unmeasured


def discover_endpoints(document: dict[str, Any]) -> list[Target]:
    """Every GET operation of the OpenAPI document, with its query parameters."""
    targets = []
    for path, operations in sorted(document.get("paths", {}).items()):
        operation = operations.get("get")
        if operation is None:
            continue
        params = [_openapi_param(p, document) for p in operation.get("parameters", [])
                  if p.get("in") == "query"]
        targets.append(Target("endpoint", f"GET {path}", operation.get("operationId", path),
                              tuple(OPENAPI_PATH_PARAM.findall(path)), params))
    return targets


def _openapi_param(spec: dict[str, Any], document: dict[str, Any]) -> Param:
    schema = _schema(spec.get("schema", {}), document)
    kind = {"integer": "int", "boolean": "bool"}.get(schema.get("type", ""), "str")
    if schema.get("format") == "date":
        kind = "date"
    return Param(spec["name"], bool(spec.get("required")), kind,
                 tuple(str(v) for v in schema.get("enum", ())),
                 schema.get("minimum"), schema.get("maximum"))


def _schema(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema with ``$ref`` resolved and ``anyOf [T, null]`` reduced to T."""
    for _ in range(5):
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in schema:
            schema = next((s for s in schema["anyOf"] if s.get("type") != "null"), {})
        else:
            break
    return schema
