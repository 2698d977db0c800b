"""The API reference (docs/reference/api.md, once the README's API section) stays in step with
the API the code serves.

Why a test: endpoints are added in code (``ettweb/api/``) by people who may not think of the
docs, and a reference that lists fewer endpoints than exist (or ones that are gone) sends an
integrator to the wrong place. The OpenAPI document the app serves at
``/api/v1/openapi.json`` is the truth; every operation in it must have its row in the
reference's endpoint table, and every row must name an operation that exists.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

#: The API reference (moved out of the README, which is the front door only).
README = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")
#: A row of the endpoint table: ``| `GET /api/v1/jobs/{job}` | … |``.
ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/api/v1/[^`\s]*)` \|", re.MULTILINE)


def api_section() -> str:
    """The README's ``## API`` section, up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## API\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def documented() -> set[tuple[str, str]]:
    return {(method, path) for method, path in ROW.findall(api_section())}


def operations(document: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(METHOD, path) → summary of every operation in an OpenAPI document."""
    return {(method.upper(), path): op.get("summary", "")
            for path, ops in document["paths"].items()
            for method, op in ops.items() if method in METHODS}


@pytest.fixture
def served(client: Client, db: None) -> dict[str, Any]:
    """The OpenAPI document as a logged-in reader gets it from the running app."""
    client.force_login(User.objects.create_user("readme-reader"))
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_every_endpoint_has_its_row_in_the_readme(served: dict[str, Any]) -> None:
    missing = {key: summary for key, summary in operations(served).items()
               if key not in documented()}
    rows = "\n".join(f"| `{method} {path}` | {summary} |"
                     for (method, path), summary in sorted(missing.items()))
    assert not missing, (f"docs/reference/api.md's API table lacks these endpoints; "
                         f"add rows:\n{rows}")


def test_every_row_in_the_readme_is_an_endpoint(served: dict[str, Any]) -> None:
    stale = sorted(documented() - set(operations(served)))
    assert not stale, ("docs/reference/api.md's API table lists endpoints the API does not "
                       f"serve: {stale}")


def test_the_table_is_found_and_not_empty() -> None:
    """Guards the two tests above: a renamed heading or a changed row format would make an
    empty table pass the 'no stale rows' check."""
    rows = documented()
    assert ("GET", "/api/v1/jobs") in rows and ("POST", "/api/v1/rollouts") in rows
    assert len(rows) >= 10


def test_the_readme_names_what_a_caller_needs() -> None:
    section = api_section()
    for needed in ("ett_api_token", "Authorization: Bearer", "/api/v1/openapi.json",
                   "/api/v1/docs", '{"error": "<parameter>: <problem>"}', "curl ", "X-CSRFToken"):
        assert needed in section, f"the API section no longer mentions {needed!r}"


def test_the_offline_schema_command_in_the_readme_gives_the_served_document(
        served: dict[str, Any]) -> None:
    command = re.search(r"`python manage.py (export_openapi_schema [^`>]*?)\s*(?:>[^`]*)?`",
                        api_section())
    assert command is not None, "the README no longer says how to export the schema offline"
    out = StringIO()
    call_command(*command.group(1).split(), stdout=out)
    assert operations(json.loads(out.getvalue())) == operations(served)


def test_the_docs_page_answers_a_logged_in_reader(client: Client, db: None) -> None:
    assert client.get("/api/v1/docs").status_code == 302  # the login, like every page
    client.force_login(User.objects.create_user("docs-reader"))
    assert client.get("/api/v1/docs").status_code == 200
