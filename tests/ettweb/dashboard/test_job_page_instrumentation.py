"""The job page's Instrumentation panel: what looks missing from a job's events, largest
first, with what to instrument; one quiet line when the check found nothing; nothing at all
when the job was not checked (rolled up before the check existed)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.ingest.batches import ingest_lines
from ettweb.queries.job_detail import SHOWN_FINDINGS
from ettweb.rollups.models import JobRollup
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.completeness_events import own_ids, restarted, slow_first

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="viewer", password="pw-viewer-1"))
    return client


def store(timeline: Timeline) -> None:
    refresh_jobs(ingest_lines(timeline.lines()).jobs)


def page(client: Client, job: str) -> str:
    response = client.get(f"/jobs/{quote(job)}/")
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def panel(html: str) -> str:
    found = re.search(r'<section class="card warning" id="instrumentation">(.*?)</section>',
                      html, re.S)
    assert found, "no Instrumentation panel"
    return found.group(1)


def test_the_panel_says_what_looks_missing_and_what_to_do(viewer: Client) -> None:
    store(restarted())
    shown = panel(page(viewer, "restarted"))
    assert "<h2>Instrumentation</h2>" in shown
    assert "1 thing looks missing" in shown
    assert ("Attempt 1: checkpoint_load looks missing: 40 s unattributed before training "
            "resumed at step 600.") in shown
    assert "Wrap the checkpoint restore in a checkpoint_load span" in shown
    assert 'class="finding-checkpoint_load_missing"' in shown


def test_a_complete_job_gets_one_quiet_line(viewer: Client) -> None:
    store(worked_example())
    html = page(viewer, "j1")
    assert 'id="instrumentation"' in html and "Instrumentation: complete" in html
    assert 'class="card warning" id="instrumentation"' not in html


def test_a_job_not_checked_shows_nothing(viewer: Client) -> None:
    store(slow_first(70.0))
    assert "compile looks folded" in page(viewer, "slow")
    JobRollup.objects.filter(job="slow").update(instrumentation=None)
    html = page(viewer, "slow")
    assert 'id="instrumentation"' not in html and "compile looks folded" not in html


def test_the_largest_findings_are_listed_and_the_rest_counted(viewer: Client) -> None:
    """Twelve resumes without checkpoint_load, the later ones waiting longer: the page lists
    the largest few and says how many more the API has."""
    t = Timeline("often")
    t.mark(0, "attempt_start", 0)
    t.span(0, "model_init", 0, 10)
    t.train(0, 10, 110, (0, 100))
    t.mark(0, "attempt_end", 110, status="failed")
    clock = 200.0
    for attempt in range(1, 13):
        wait = 20.0 + attempt
        t.mark(attempt, "attempt_start", clock)
        t.span(attempt, "model_init", clock, clock + 5)
        t.train(attempt, clock + 5 + wait, clock + 105 + wait, (100 * attempt, 100 * attempt + 100))
        t.mark(attempt, "attempt_end", clock + 105 + wait, status="failed")
        clock += 200
    store(own_ids(t))
    shown = panel(page(viewer, "often"))
    assert "12 things look missing" in shown
    items = re.findall(r'<li class="finding-checkpoint_load_missing">Attempt (\d+):', shown)
    assert [int(a) for a in items] == list(range(12, 12 - SHOWN_FINDINGS, -1))
    assert f"{12 - SHOWN_FINDINGS} more" in shown
