"""The Celery task: registered by the exact name the collector sends, JSON-only config."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import InterfaceError, OperationalError

from ettweb.celery import app
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.credentials import verify_batch
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch
from ettweb.platform.retry import DATABASE_ERRORS
from ettweb.rollups.models import DirtyJob, JobRollup
from ettweb.rollups.tasks import refresh_rollups
from tests.ettweb.ingest.conftest import Signer


def test_task_is_discoverable_by_name() -> None:
    app.loader.import_default_modules()
    assert app.tasks["ett.ingest_batch"].name == ingest_batch.name == "ett.ingest_batch"


def test_worker_reliability_settings() -> None:
    conf = app.conf
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1


def test_database_outages_are_waited_out_not_acked_away() -> None:
    """In place (ettweb/platform/retry.py): Celery's autoretry acks the message after publishing a
    copy, and that copy is where batches were lost."""
    assert not getattr(ingest_batch, "autoretry_for", ())
    assert ingest_batch.run.__wrapped__.__name__ == "ingest_batch"
    assert {OperationalError, InterfaceError} <= set(DATABASE_ERRORS)


def test_unsigned_batches_are_refused_by_default() -> None:
    assert settings.ETT_INGEST_REQUIRE_AUTH is True


@pytest.mark.django_db
def test_task_ingests_a_batch(worked_example_lines: list[str], sign: Signer) -> None:
    lines = [*worked_example_lines, '{"v": 1}']
    assert ingest_batch(lines, source="collector@node-3", auth=sign(lines)) == {
        "stored": len(worked_example_lines), "duplicates": 0, "rejected": 1, "expired": 0}
    assert Event.objects.count() == len(worked_example_lines)
    quarantined = QuarantinedEvent.objects.get()
    assert quarantined.source == "collector@node-3"
    assert quarantined.reason == "missing required field 'id'"


@pytest.mark.django_db
def test_task_refreshes_the_rollups_of_the_jobs_in_the_batch(
        worked_example_lines: list[str], one_gpu_job_lines: list[str], sign: Signer) -> None:
    first = worked_example_lines[:6]
    ingest_batch(first, auth=sign(first))
    partial = JobRollup.objects.get(job="j1")
    assert (partial.status, partial.wall_s) == ("running", 80.0)  # live: 1000 -> 1080
    rest = worked_example_lines[6:] + one_gpu_job_lines
    ingest_batch(rest, auth=sign(rest))
    assert {r.job: (r.status, r.wall_s) for r in JobRollup.objects.all()} == {
        "j1": ("completed", 113.0), "j2": ("completed", 100.0)}


class SentRefreshes:
    """Records ``ett.refresh_rollups`` sends instead of publishing them, and can run them."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def apply_async(self, **options: Any) -> None:
        self.sent.append(options)

    def run_all(self) -> None:
        for options in self.sent:
            refresh_rollups(*options["args"])


@pytest.fixture
def sent_refreshes(monkeypatch: pytest.MonkeyPatch) -> SentRefreshes:
    sent = SentRefreshes()
    monkeypatch.setattr(refresh_rollups, "apply_async", sent.apply_async)
    return sent


@pytest.mark.django_db
def test_a_worker_schedules_one_debounced_refresh_per_newly_dirty_job(
        worked_example_lines: list[str], sign: Signer, sent_refreshes: SentRefreshes) -> None:
    first, rest = worked_example_lines[:6], worked_example_lines[6:]
    ingest_batch.apply(args=(first, "", sign(first)), routing_key="ett-fleet").get()
    ingest_batch.apply(args=(rest, "", sign(rest)), routing_key="ett-fleet").get()
    assert [list(s["args"]) for s in sent_refreshes.sent] == [[["j1"]]]  # the 2nd batch shares it
    assert sent_refreshes.sent[0]["queue"] == "ett-fleet"
    assert sent_refreshes.sent[0]["countdown"] == settings.ETT_ROLLUP_REFRESH_DELAY_S
    assert not JobRollup.objects.exists()  # nothing refreshed inline
    sent_refreshes.run_all()
    assert round(JobRollup.objects.get(job="j1").ett_pct, 2) == 70.80  # covers both batches
    assert not DirtyJob.objects.exists()


@pytest.mark.django_db
def test_a_retried_batch_refreshes_its_jobs_again(worked_example_lines: list[str],
                                                  sign: Signer,
                                                  sent_refreshes: SentRefreshes) -> None:
    """A batch stored before its worker died is redelivered with the same nonce: not a
    replay, and its jobs' refresh is scheduled again though their marks already exist."""
    auth = sign(worked_example_lines)
    nonce = verify_batch(auth, worked_example_lines)
    ingest_lines(worked_example_lines, nonce=nonce)  # stored, but the refresh never ran
    assert not JobRollup.objects.exists()
    retried = ingest_batch.apply(args=(worked_example_lines, "", auth), retries=1).get()
    assert retried["duplicates"] == len(worked_example_lines)
    assert [list(s["args"]) for s in sent_refreshes.sent] == [[["j1"]]]
    sent_refreshes.run_all()
    assert round(JobRollup.objects.get(job="j1").ett_pct, 2) == 70.80
