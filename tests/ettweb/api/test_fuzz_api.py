"""Fuzzing the rollout API (issue 13): over 2,000 malformed request bodies and parameters.
Every one is a 201 (when it happens to be valid) or a 400 whose ``error`` names what is wrong
— never a 500, never a rollout stored from a refused body.

Bodies are mutations of a valid one (a field dropped, given a wrong type or value, an
unknown field added, scope fields with junk), random JSON, and bytes that are not JSON at all.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ettweb.access.tokens import issue_token
from ettweb.rollouts.models import Rollout
from tests.examples import examples

pytestmark = pytest.mark.django_db
GOOD: dict[str, Any] = {"name": "async checkpointing", "component": "checkpointing",
                        "at": "2026-10-12T09:30:00Z", "scope": {"teams": ["ads"]}}
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                 st.sampled_from(["", "\x00", "\ud800", "x" * 5000, "2026-13-45T99:00:00Z",
                                  "javascript:alert(1)", "NaN", "9999-12-31T23:59:59Z",
                                  "0001-01-01T00:00:00Z"]),
                 st.lists(st.text(max_size=5), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
SCOPES = st.one_of(JUNK, st.fixed_dictionaries({}, optional={
    "teams": JUNK, "models": JUNK, "clusters": JUNK, "job_pattern": JUNK,
    "spam": JUNK}))
FUZZ = settings(max_examples=examples(600), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture
def auth() -> dict[str, str]:
    admin = User.objects.create_user("d", is_superuser=True)  # rollouts are written too
    return {"HTTP_AUTHORIZATION": f"Bearer {issue_token(admin, 'ci')}"}


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 3))
    if kind == 0:  # one field dropped or wrong
        body = dict(GOOD)
        field = draw(st.sampled_from([*GOOD, "notes", "link"]))
        if draw(st.booleans()) and field in body:
            del body[field]
        else:
            body[field] = draw(SCOPES if field == "scope" else JUNK)
        return body
    if kind == 1:  # an unknown field
        return {**GOOD, draw(st.text(max_size=10).filter(lambda k: k not in GOOD)): draw(JUNK)}
    if kind == 2:  # the scope alone is junk
        return {**GOOD, "scope": draw(SCOPES)}
    return draw(JUNK)  # not an object at all


def _post(client: Client, auth: dict[str, str], data: str | bytes) -> Any:
    return client.post("/api/v1/rollouts", data=data, content_type="application/json", **auth)


def _refused_with_a_reason(response: Any) -> None:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert isinstance(error, str) and error.strip()


@FUZZ
@given(body=bodies())
def test_no_body_is_a_500(client: Client, auth: dict[str, str], body: Any) -> None:
    before = Rollout.objects.count()
    try:
        data = json.dumps(body, allow_nan=True)
    except ValueError:  # e.g. a lone surrogate json cannot encode: send its bytes anyway
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    response = _post(client, auth, data)
    if response.status_code == 201:
        assert Rollout.objects.count() == before + 1
        return
    _refused_with_a_reason(response)
    assert Rollout.objects.count() == before


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_bytes_that_are_not_json_are_400s(client: Client, auth: dict[str, str],
                                          data: bytes) -> None:
    response = _post(client, auth, data)
    assert response.status_code in (201, 400), response.content[:300]
    if response.status_code == 400:
        _refused_with_a_reason(response)


@settings(max_examples=examples(600), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.sampled_from(["/api/v1/rollouts/{x}", "/api/v1/rollouts/{x}/impact",
                             "/api/v1/rollouts/1/impact?window={x}", "/api/v1/rollouts?limit={x}",
                             "/api/v1/rollouts?component={x}", "/api/v1/reports/weekly?week={x}",
                             "/api/v1/fleet/summary?date_from={x}&date_to=2026-03-01",
                             "/api/v1/reports/weekly?week=2026-W10&components={x}"]),
       value=st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=30),
                       st.sampled_from(["%00", "%FF", "1e9", "-0", "9" * 40, "%2F..%2F"])))
def test_no_parameter_is_a_500(client: Client, auth: dict[str, str], path: str,
                               value: Any) -> None:
    from urllib.parse import quote

    text = value if isinstance(value, str) and value.startswith("%") else quote(str(value),
                                                                              safe="")
    response = client.get(path.replace("{x}", text), **auth)
    assert response.status_code in (200, 400, 404), (path, value, response.content[:300])
