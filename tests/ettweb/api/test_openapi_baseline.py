"""The OpenAPI document keeps every path, parameter and response field it had.

Why: deploy pipelines and scripts are written against ``/api/v1/openapi.json``; moving code
between modules or deriving schemas from the query results must not drop a field, rename a
parameter or turn a number into a string under them. ``openapi_baseline.json`` is the
document as it was before the API was split into one module per resource, normalised to
what a client depends on: per operation its parameters (where, required, type) and request
body, and per response status every field's path and type (``$ref``s resolved, titles and
descriptions left out). The live document may have more (a new endpoint, field or status),
never less and never a different type; a deliberate change regenerates the baseline with
``ETT_WRITE_OPENAPI_BASELINE=1 pytest tests/ettweb/api/test_openapi_baseline.py`` and says
why in its commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token

BASELINE = Path(__file__).with_name("openapi_baseline.json")
METHODS = ("get", "post", "put", "patch", "delete")


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def type_of(schema: dict[str, Any], document: dict[str, Any]) -> str:
    """A schema's type in one word (``number|null``, ``array``, ``string:date``,
    ``map<number>``), its fields left to :func:`fields_of`."""
    schema = _resolve(schema, document)
    if "anyOf" in schema:
        return "|".join(sorted(type_of(option, document) for option in schema["anyOf"]))
    kind = str(schema.get("type", "any"))
    if "format" in schema:
        kind += f":{schema['format']}"
    if "enum" in schema:
        kind += "{" + ",".join(sorted(map(str, schema["enum"]))) + "}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        kind = f"map<{type_of(schema['additionalProperties'], document)}>"
    if kind == "array" and "items" in schema and "prefixItems" not in schema:
        kind = f"array<{type_of(schema['items'], document)}>"
    if "prefixItems" in schema:
        kind = "tuple<" + ",".join(type_of(s, document) for s in schema["prefixItems"]) + ">"
    return kind


def fields_of(schema: dict[str, Any], document: dict[str, Any], prefix: str,
              out: dict[str, str], seen: tuple[str, ...] = ()) -> None:
    """Every field under ``schema`` as ``prefix.name`` → its type (``?`` when optional);
    arrays' items are ``name[]`` and nullable objects' fields are walked too."""
    ref = schema.get("$ref", "")
    if ref and ref in seen:
        return
    seen = (*seen, ref) if ref else seen
    schema = _resolve(schema, document)
    for option in schema.get("anyOf", []):
        fields_of(option, document, prefix, out, seen)
    if "items" in schema and isinstance(schema["items"], dict):
        fields_of(schema["items"], document, f"{prefix}[]", out, seen)
    if isinstance(schema.get("additionalProperties"), dict):
        fields_of(schema["additionalProperties"], document, f"{prefix}{{}}", out, seen)
    required = set(schema.get("required", ()))
    for name, field in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        out[path] = type_of(field, document) + ("" if name in required else "?")
        fields_of(field, document, path, out, seen)


def normalised(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``"GET /api/v1/…"`` → {``param query limit``: type, ``200.jobs[].job``: type, …}."""
    shape: dict[str, dict[str, str]] = {}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            entries: dict[str, str] = {}
            for parameter in operation.get("parameters", []):
                entries[f"param {parameter['in']} {parameter['name']}"] = (
                    type_of(parameter["schema"], document)
                    + ("" if parameter.get("required") else "?"))
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                fields_of(content["schema"], document, f"body {media}", entries)
            for status, response in operation.get("responses", {}).items():
                for content in response.get("content", {}).values():
                    entries[status] = type_of(content["schema"], document)
                    fields_of(content["schema"], document, status, entries)
            shape[f"{method.upper()} {path}"] = entries
    return shape


@pytest.fixture
def served(client: Client, db: None) -> dict[str, Any]:
    """The document as a pipeline with a bearer token gets it from the running app."""
    token = issue_token(User.objects.create_user("openapi-reader"), "openapi")
    response = client.get("/api/v1/openapi.json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_the_document_keeps_every_path_parameter_and_field(served: dict[str, Any]) -> None:
    live = normalised(served)
    if os.environ.get("ETT_WRITE_OPENAPI_BASELINE"):
        BASELINE.write_text(json.dumps(live, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    baseline: dict[str, dict[str, str]] = json.loads(BASELINE.read_text(encoding="utf-8"))
    problems = []
    for operation, entries in sorted(baseline.items()):
        if operation not in live:
            problems.append(f"{operation}: gone")
            continue
        for where, kind in sorted(entries.items()):
            now = live[operation].get(where)
            if now != kind:
                problems.append(f"{operation} {where}: {kind} → {now or 'gone'}")
    assert not problems, "the OpenAPI document lost or changed:\n" + "\n".join(problems)


def test_the_baseline_is_not_empty() -> None:
    """Guards the test above: an empty baseline would pass whatever the API served."""
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    assert len(baseline) >= 15
    assert baseline["GET /api/v1/fleet/trend"]["200.points[].ett_pct"] == "number"
