"""The jobs list and the job page show a running job not heard from for ``ETT_STALE_AFTER_S``
as *stale, last heard … ago* (issue 41, part 4), and the list filters by it."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.ettweb.stale_fleet import store_stale_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_in(client: Client) -> Client:
    client.force_login(User.objects.create_user("viewer"))
    return client


def _status_cells(html: str) -> dict[str, str]:
    """Each job row's status cell, as text (tags dropped)."""
    rows = re.findall(r'<a href="/jobs/([^/]+)/">.*?</td>(.*?)</tr>', html, re.S)
    cells = {}
    for job, rest in rows:
        status = re.findall(r"<td[^>]*>(.*?)</td>", rest, re.S)[4]
        cells[job] = " ".join(re.sub(r"<[^>]+>", "", status).split())
    return cells


def test_the_jobs_list_shows_a_stale_job_and_links_to_them(logged_in: Client) -> None:
    store_stale_fleet()
    html = logged_in.get("/?sort=job").content.decode()
    assert _status_cells(html) == {"done": "completed", "gone": "stale, last heard 10 min ago",
                                   "live": "running"}
    assert 'id="jobs-stale"' in html and "1 running job</a>" in html
    assert 'href="?sort=job&amp;status=stale"' in html
    only = logged_in.get("/?status=stale").content.decode()
    assert list(_status_cells(only)) == ["gone"]
    csv_rows = logged_in.get("/?format=csv&sort=job").content.decode().splitlines()
    assert csv_rows[0].endswith(",last_heard,stale")
    assert [row.rsplit(",", 1)[1] for row in csv_rows[1:]] == ["false", "true", "false"]


def test_no_stale_note_when_every_running_job_is_heard(logged_in: Client) -> None:
    store_stale_fleet()
    html = logged_in.get("/?status=completed").content.decode()
    assert 'id="jobs-stale"' not in html and "stale, last heard" not in html


def test_the_job_page_says_when_it_was_last_heard(logged_in: Client) -> None:
    store_stale_fleet()
    gone = logged_in.get("/jobs/gone/").content.decode()
    assert 'id="job-stale"' in gone
    note = re.search(r'id="job-stale">(.*?)</section>', gone, re.S)
    assert note and "last heard" in note.group(1) and "10 min ago" in note.group(1)
    assert "more than\n  2m 00s" in note.group(1)  # the setting, 120 s
    attempts = re.search(r'<table id="attempts">(.*?)</table>', gone, re.S)
    assert attempts and "stale, last heard" in attempts.group(1)
    live = logged_in.get("/jobs/live/").content.decode()
    assert 'id="job-stale"' not in live and "stale, last heard" not in live
