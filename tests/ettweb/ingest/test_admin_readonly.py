"""Stored facts are view-only in the admin, even for a superuser, and show UTC times (issue 14).

Events, jobs, the quarantine, collector health and job rollups are what ingestion and the
refresh wrote: the admin lists and shows them, and answers 403 to add, change and delete.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client

from ettweb.ingest.models import CollectorHealth, Event, Job, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch
from ettweb.platform.admin_readonly import utc_text
from ettweb.rollups.models import JobRollup

pytestmark = pytest.mark.django_db

READ_ONLY = {"ingest/event": Event, "ingest/job": Job, "ingest/quarantinedevent": QuarantinedEvent,
             "ingest/collectorhealth": CollectorHealth, "rollups/jobrollup": JobRollup}


@pytest.fixture
def superuser(client: Client, worked_example_lines: list[str]) -> Client:
    ingest_batch([*worked_example_lines, '{"v": 1, "job": "j1"}'])
    CollectorHealth.objects.create(source="node-1", collector_id="col-1",
                                   last_success_ts=1_772_366_400.0, report_epoch=1_772_360_000.5)
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-1"))
    return client


def _one(model: type[Model]) -> Model:
    row = model._default_manager.order_by("pk").first()
    assert row is not None, model
    return row


@pytest.mark.parametrize("path", READ_ONLY)
def test_add_change_and_delete_are_refused(superuser: Client, path: str) -> None:
    model = READ_ONLY[path]
    row = _one(model)
    before = model._default_manager.count()
    assert superuser.get(f"/admin/{path}/add/").status_code == 403
    assert superuser.post(f"/admin/{path}/add/", {}).status_code == 403
    assert superuser.post(f"/admin/{path}/{row.pk}/change/", {}).status_code == 403
    assert superuser.get(f"/admin/{path}/{row.pk}/delete/").status_code == 403
    assert superuser.post(f"/admin/{path}/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    # The list has no bulk "delete selected" either: a POSTed action does nothing.
    superuser.post(f"/admin/{path}/", {"action": "delete_selected", "_selected_action": [row.pk],
                                       "post": "yes"})
    assert model._default_manager.count() == before


@pytest.mark.parametrize("path", READ_ONLY)
def test_rows_can_still_be_listed_and_viewed(superuser: Client, path: str) -> None:
    listing = superuser.get(f"/admin/{path}/")
    assert listing.status_code == 200
    html = listing.content.decode()
    assert f'href="/admin/{path}/add/"' not in html and 'name="action"' not in html
    view = superuser.get(f"/admin/{path}/{_one(READ_ONLY[path]).pk}/change/")
    assert view.status_code == 200
    assert 'name="_save"' not in view.content.decode()


def test_event_times_are_utc_datetimes_not_epoch_floats(superuser: Client) -> None:
    html = superuser.get("/admin/ingest/event/?job=j1&kind=span").content.decode()
    assert "1970-01-01 00:16:40 UTC" in html  # the worked example's first span starts at 1000
    cells = re.findall(r'<td class="field-start_utc">([^<]*)</td>', html)
    assert cells and all(c.endswith(" UTC") for c in cells), cells
    assert not re.search(r">\s*1000\.0\s*<", html)
    row = Event.objects.filter(job="j1", kind="span").order_by("start").first()
    assert row is not None
    detail = superuser.get(f"/admin/ingest/event/{row.pk}/change/").content.decode()
    assert "1970-01-01 00:16:40 UTC" in detail


def test_job_rollup_and_health_times_are_utc(superuser: Client) -> None:
    jobs = superuser.get("/admin/ingest/job/").content.decode()
    assert "1970-01-01 00:18:33 UTC" in jobs  # the last event, at 1113
    rollups = superuser.get("/admin/rollups/jobrollup/").content.decode()
    assert "1970-01-01 00:16:40 UTC" in rollups and "1970-01-01 00:18:33 UTC" in rollups
    health = superuser.get("/admin/ingest/collectorhealth/").content.decode()
    assert "2026-03-01 12:00:00 UTC" in health
    row = CollectorHealth.objects.get(source="node-1")
    detail = superuser.get(f"/admin/ingest/collectorhealth/{row.pk}/change/").content.decode()
    assert "2026-03-01 10:13:20.500 UTC" in detail  # the agent's start, report_epoch


def test_utc_text() -> None:
    assert utc_text(None) == "—"
    assert utc_text(0.0) == "1970-01-01 00:00:00 UTC"
    assert utc_text(1.25) == "1970-01-01 00:00:01.250 UTC"
