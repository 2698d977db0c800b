"""Operators can browse events, jobs and the quarantine in the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.ingest.batches import ingest_lines


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["event", "job", "quarantinedevent"])
def test_admin_changelists_list_ingested_rows(client: Client, model: str,
                                              worked_example_lines: list[str]) -> None:
    ingest_lines([*worked_example_lines, '{"v": 1, "job": "j1"}'])
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-1"))
    response = client.get(f"/admin/ingest/{model}/")
    assert response.status_code == 200
    assert b"j1" in response.content


@pytest.mark.django_db
def test_quarantine_filters_by_job_as_the_job_page_links(client: Client) -> None:
    ingest_lines(['{"v": 1, "job": "j1"}', '{"v": 1, "job": "zz-other"}'])
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-1"))
    response = client.get("/admin/ingest/quarantinedevent/?job=j1")
    assert response.status_code == 200
    assert b"zz-other" not in response.content and b"1 quarantined event" in response.content
