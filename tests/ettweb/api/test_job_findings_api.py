"""``GET /api/v1/jobs/{job}`` carries the completeness check's findings as ``instrumentation``:
every finding (the page lists the largest), ``[]`` for a job checked complete."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.access.tokens import issue_token
from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.attribution.attribution_events import worked_example
from tests.ettweb.attribution.completeness_events import restarted

pytestmark = pytest.mark.django_db


def test_the_job_endpoint_lists_the_findings(client: Client) -> None:
    refresh_jobs(ingest_lines(worked_example().lines() + restarted().lines()).jobs)
    token = issue_token(User.objects.create_user("reader"), "findings test")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = client.get("/api/v1/jobs/restarted", **auth).json()
    (finding,) = body["instrumentation"]
    assert list(finding) == ["kind", "attempt", "seconds", "step", "before", "after",
                             "message", "advice"]
    assert (finding["kind"], finding["attempt"], finding["step"]) == (
        "checkpoint_load_missing", 1, 600)
    assert finding["seconds"] == pytest.approx(40.0)
    assert finding["message"].startswith("Attempt 1: checkpoint_load looks missing")
    assert client.get("/api/v1/jobs/j1", **auth).json()["instrumentation"] == []
