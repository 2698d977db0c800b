"""``/api/v1/fleet/summary`` and ``/api/v1/reports/weekly``: what they answer for a range or a
week, and that every bad parameter is a 400 naming it (never a 500)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token
from ettweb.queries import IsoWeek, TrendQuery, calculate
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

W11 = IsoWeek(2026, 11)


@pytest.fixture
def token(db: None) -> str:
    events: list[dict[str, Any]] = []
    events += day_job("a", 9, 2, "ads", ("compile", 1), 9)   # W11: 20 wall, 18 productive
    events += day_job("b", 11, 4, "feed", ("checkpoint_save", 1), 9)  # W11: 40, 36
    store(events)
    return issue_token(User.objects.create_user("reader"), "endpoint test")


def get(client: Client, token: str, path: str) -> tuple[int, dict[str, Any]]:
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


def test_the_summary_is_the_trend_of_the_same_days(client: Client, token: str) -> None:
    status, body = get(client, token, "/api/v1/fleet/summary?date_from=2026-03-09"
                                      "&date_to=2026-03-15&top=1")
    assert status == 200
    assert body["days"] == ["2026-03-09", "2026-03-15"]
    assert body["ett_pct"] == pytest.approx(calculate(TrendQuery(W11.range)).ett_pct)
    assert body["ett_pct"] == pytest.approx(100 * 54 / 60)
    assert [j["job"] for j in body["top_jobs"]] == ["b"]  # lost 4 GPU-h; a lost 2
    assert body["lost_by_component_gpu_s"]["checkpointing"] == pytest.approx(4 * 3600.0)


def test_the_weekly_report_lists_the_asked_components_first(client: Client, token: str) -> None:
    status, body = get(client, token, "/api/v1/reports/weekly?week=2026-W11"
                                      "&components=evaluation,pt2_compiler")
    assert status == 200 and body["week"] == "2026-W11"
    assert [c["component"] for c in body["components"][:2]] == ["evaluation", "pt2_compiler"]
    assert body["subject"] == f"ETT% 2026-W11: {100 * 54 / 60:.1f}%"  # no data in W10


@pytest.mark.parametrize(("path", "error"), [
    ("/api/v1/reports/weekly?week=2026-47", "week: week must look like 2026-W47, not '2026-47'"),
    ("/api/v1/reports/weekly?week=2025-W53", "week: 2025 has ISO weeks 1 to 52, not 53"),
    ("/api/v1/reports/weekly?week=2026-W11&components=ckpt", "components: unknown component "
                                                             "'ckpt' (known: "),
    ("/api/v1/reports/weekly", "week: Field required"),
    ("/api/v1/fleet/summary?date_from=2026-03-15&date_to=2026-03-09", "date_from: date_from "
                                                                   "2026-03-15 is after"),
    ("/api/v1/fleet/summary?date_from=2026-03-09&date_to=2026-03-15&top=0",
     "top: must be between 1 and 50, not 0"),
    ("/api/v1/fleet/summary?date_from=March&date_to=2026-03-15", "date_from: "),
])
def test_bad_parameters_are_400s_that_name_them(client: Client, token: str, path: str,
                                                error: str) -> None:
    status, body = get(client, token, path)
    assert status == 400, body
    assert body["error"].startswith(error), body


def test_no_token_no_numbers(client: Client, token: str) -> None:
    response = client.get("/api/v1/reports/weekly?week=2026-W11")
    assert response.status_code == 401
