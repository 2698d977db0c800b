"""The fleet overview's headline (issue 14, item 2): the range's last 7 days against the 7
before, GPUs' worth of capacity lost, failures per 1,000 GPU-hours, the trend's net change,
and lost GPU-hours by component stacked per period."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.pages.templatetags.ett_format import signed_pct, signed_pts
from tests.ettweb.charts import traces_of
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

pytestmark = pytest.mark.django_db
RANGE = "date_from=2026-03-01&date_to=2026-03-14"


@pytest.fixture
def page(client: Client) -> str:
    # Mar 2 (the 7 days before): 2 GPUs, 1 h compile + 9 h training: 20 wall, 18 productive.
    # Mar 10 (the last 7 days): 4 GPUs, 2 h checkpoint save + 8 h training: 40 wall, 32.
    store([*day_job("a", 2, 2, "ads", ("compile", 1), 9),
           *day_job("b", 10, 4, "feed", ("checkpoint_save", 2), 8)])
    client.force_login(User.objects.create_user("viewer"))
    response = client.get(f"/fleet/?{RANGE}")
    assert response.status_code == 200
    return response.content.decode()


def _tile(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">([^<]*)<', html)
    assert found is not None, element_id
    return found.group(1).strip()


def test_the_last_seven_days_against_the_seven_before(page: str) -> None:
    assert _tile(page, "week-ett") == "80.00%"
    assert _tile(page, "week-change") == "\u221210.00 pts vs the 7 days before (\u221211.1%)"


def test_capacity_lost_in_gpus_and_failures_per_thousand_gpu_hours(page: str) -> None:
    lost_gpu_hours, hours = 2.0 + 8.0, 14 * 24
    assert float(_tile(page, "gpus-lost")) == pytest.approx(lost_gpu_hours / hours, rel=0.01)
    assert _tile(page, "failures-per-1k") == "0.00"


def test_the_trend_is_headed_by_its_net_change(page: str) -> None:
    assert _tile(page, "trend-change") == "\u221210.00 pts from the first day to the last"


def test_lost_gpu_hours_by_component_are_stacked_per_period(page: str) -> None:
    traces = traces_of(page, "lost-over-time")
    by_name = {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in traces}
    assert set(by_name) == {"checkpointing", "pt2_compiler"}
    assert by_name["checkpointing"]["2026-03-10"] == pytest.approx(8.0)
    assert by_name["pt2_compiler"]["2026-03-02"] == pytest.approx(2.0)
    assert [t["name"] for t in traces] == ["checkpointing", "pt2_compiler"]  # largest first


def test_signs_are_spelled_out() -> None:
    assert (signed_pts(1.256), signed_pts(-0.4), signed_pts(None)) == ("+1.26 pts",
                                                                      "\u22120.40 pts", "—")
    assert signed_pct(-11.11) == "\u221211.1%"
