"""Every day filter is the browser's date picker and still takes YYYY-MM-DD (issue 14)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.components.forms import ComponentFilterForm
from ettweb.pages.forms import FleetFilterForm
from ettweb.rollouts.forms import RolloutListForm

pytestmark = pytest.mark.django_db

PAGES = ["/fleet/", "/components/", "/components/checkpointing/", "/rollouts/"]


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="viewer", password="pw-viewer-1"))
    return client


def _date_inputs(html: str) -> dict[str, str]:
    """``name -> the whole <input>`` of every day filter on the page."""
    return {name: tag for tag in re.findall(r"<input[^>]*>", html)
            for name in re.findall(r'name="(date_from|date_to)"', tag)}


@pytest.mark.parametrize("form_class", [FleetFilterForm, ComponentFilterForm, RolloutListForm])
def test_forms_render_day_fields_as_date_pickers(form_class: type) -> None:
    form = form_class({"date_from": "2026-03-01", "date_to": "2026-03-05"})
    inputs = _date_inputs(str(form))
    assert set(inputs) == {"date_from", "date_to"}
    for name, day in (("date_from", "2026-03-01"), ("date_to", "2026-03-05")):
        assert 'type="date"' in inputs[name] and f'value="{day}"' in inputs[name]


@pytest.mark.parametrize("url", PAGES)
def test_pages_render_date_pickers_with_the_range_in_use(viewer: Client, url: str) -> None:
    response = viewer.get(url, {"date_from": "2026-03-01", "date_to": "2026-03-05"})
    assert response.status_code == 200
    inputs = _date_inputs(response.content.decode())
    assert 'type="date"' in inputs["date_from"] and 'value="2026-03-01"' in inputs["date_from"]
    assert 'type="date"' in inputs["date_to"] and 'value="2026-03-05"' in inputs["date_to"]


@pytest.mark.parametrize("url", PAGES)
@pytest.mark.parametrize("value", ["03/01/2026", "2026-13-01", "yesterday"])
def test_bad_days_are_a_400_naming_the_parameter(viewer: Client, url: str, value: str) -> None:
    response = viewer.get(url, {"date_from": value})
    assert response.status_code == 400
    assert "date_from: must be a day written YYYY-MM-DD" in response.content.decode()
