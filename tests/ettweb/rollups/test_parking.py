"""A refresh that cannot be done never holds other jobs up, nor is tried forever.

Events whose times no refresh should attribute (a heartbeat at 10¹⁸ s) are stored here
through the storing step alone, as if they predated ingestion's time window: the refresh must
refuse them in bounded memory and time, park the job, and refresh the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rollup_fleet import EPOCH, FleetBuilder

from ettweb.attribution.bounds import JobOutOfBounds, check_windows
from ettweb.attribution.engine import AttemptWindow, attribute
from ettweb.ingest.batches import _store
from ettweb.rollups import parking
from ettweb.rollups.chunk_store import mark_chunks
from ettweb.rollups.marks import mark_dirty, stale_marks
from ettweb.rollups.models import DailyCategoryRollup, JobRollup, ParkedRefresh
from ettweb.rollups.refresh import refresh_jobs
from ettweb.rollups.tasks import retry_refresh
from ettweb.settings.env import database_url

HOUR = 3600.0


def _heartbeats(job: str, times: list[float], attempt: int = 0) -> FleetBuilder:
    b = FleetBuilder()
    for at in times:
        b.mark(job, attempt, "heartbeat", at)
    for event in b.events:
        event["id"] = f"{job}-{event['id']}-{event['ts']:.0f}"
    return b


def _good(job: str) -> FleetBuilder:
    b = FleetBuilder()
    b.mark(job, 0, "attempt_start", EPOCH, attrs={"gpus": 2})
    b.span(job, 0, "train", EPOCH + 60, EPOCH + HOUR, step_start=0, step_end=100)
    b.mark(job, 0, "attempt_end", EPOCH + HOUR, attrs={"status": "completed"})
    for event in b.events:
        event["id"] = f"{job}-{event['id']}"
    return b


def parked(jobs: list[str]) -> set[str]:
    return set(ParkedRefresh.objects.filter(job__in=jobs, parked_at__isnull=False)
               .values_list("job", flat=True))


def _store_unchecked(*builders: FleetBuilder) -> None:
    """Store events as the storing step does, without ingestion's checks on time, and mark
    the chunks they land in, as ingestion does."""
    events = [event for b in builders for event in b.events]
    _store(events)
    mark_chunks(events)


FAR = [[-1e18, 0.0, EPOCH, 2100.0, 1e18], [EPOCH, 1e18], [EPOCH, EPOCH + 3700 * 86400.0]]


@pytest.mark.parametrize("times", FAR, ids=["both-ways", "far-future", "ten-years"])
def test_the_engine_attributes_a_huge_span_in_memory_of_its_events(times: list[float]) -> None:
    """The offline engine's pieces grow with events, never with the span."""
    b = _heartbeats("far", times)
    tracemalloc.start()
    began = time.perf_counter()
    job = attribute(b.events).jobs[0]
    elapsed = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert job.wall_s == pytest.approx(max(times) - min(times), rel=1e-9)
    assert peak < 5_000_000 and elapsed < 2.0


def test_the_bounds_name_the_window_and_the_limit() -> None:
    def window(start: float, end: float) -> AttemptWindow:
        return AttemptWindow(attempt=0, start=start, end=end, status="running", gpus=1)

    check_windows([window(EPOCH, EPOCH + 10 * 86400.0)], max_days=11)
    with pytest.raises(JobOutOfBounds,
                       match=r"spans 12 days, more than ETT_REFRESH_MAX_JOB_DAYS \(11\)"):
        check_windows([window(EPOCH, EPOCH + 11 * 86400.0)], max_days=11)
    with pytest.raises(JobOutOfBounds, match="outside the dates a rollup can hold"):
        check_windows([window(EPOCH, 1e18)])
    with pytest.raises(JobOutOfBounds, match="2026-03-01 00:00:00 UTC to 1e"):
        check_windows([window(EPOCH, 1e18)])


@pytest.mark.django_db
@pytest.mark.parametrize("times", FAR, ids=["both-ways", "far-future", "ten-years"])
def test_a_huge_span_is_parked_in_bounded_memory_and_others_refresh(times: list[float]) -> None:
    _store_unchecked(_heartbeats("far", times), _good("good-a"), _good("good-b"))
    tracemalloc.start()
    began = time.perf_counter()
    stats = refresh_jobs(["good-a", "far", "good-b"])
    elapsed = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50_000_000 and elapsed < 10.0
    assert stats.jobs == 2
    assert set(JobRollup.objects.values_list("job", flat=True)) == {"good-a", "good-b"}
    assert JobRollup.objects.get(job="good-a").productive_s == pytest.approx(HOUR - 60)
    parked = ParkedRefresh.objects.get(job="far")
    assert parked.parked_at is not None and parked.failures == parking.PARK_AFTER
    assert parked.error.startswith("JobOutOfBounds: job window from")
    assert not DailyCategoryRollup.objects.filter(job__job="far").exists()
    # good jobs leave no row behind: a commit clears what the refresh recorded
    assert list(ParkedRefresh.objects.values_list("job", flat=True)) == ["far"]


@pytest.mark.django_db
def test_a_parked_job_is_skipped_until_an_admin_retries_it() -> None:
    _store_unchecked(_heartbeats("far", [EPOCH, 1e18]))
    mark_dirty(["far"], 0.0, 60.0)
    refresh_jobs(["far"])
    assert parked(["far"]) == {"far"}
    assert stale_marks(time.time()) == []  # beat's sweep leaves the parked job alone
    parked_at = ParkedRefresh.objects.get(job="far").parked_at
    assert refresh_jobs(["far"], only_marked=True).jobs == 0
    row = ParkedRefresh.objects.get(job="far")
    assert (row.parked_at, row.failures) == (parked_at, parking.PARK_AFTER)  # not tried again
    # the admin deletes the wrong event, then retries: the job is refreshed and unparked
    from ettweb.ingest.models import Event

    Event.objects.filter(job="far", ts=1e18).delete()
    assert retry_refresh(["far"]) == 1
    assert not ParkedRefresh.objects.exists()
    assert JobRollup.objects.filter(job="far").exists()


@pytest.mark.django_db
def test_a_passing_failure_is_counted_and_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error that does not come back neither parks the job nor stays on record."""
    from ettweb.rollups import refresh

    _store_unchecked(_good("flaky"), _good("steady"))
    real, calls = refresh.refresh_batch, {"n": 0}

    def once(job_ids: list[str], **kwargs: Any) -> Any:
        calls["n"] += 1
        if "flaky" in job_ids and calls["n"] <= 2:  # the group, then the first try alone
            raise RuntimeError("a passing fault")
        return real(job_ids, **kwargs)

    monkeypatch.setattr(refresh, "refresh_batch", once)
    assert refresh_jobs(["flaky", "steady"]).jobs == 2
    assert not ParkedRefresh.objects.exists()


@pytest.mark.django_db
def test_different_errors_in_a_row_do_not_park(monkeypatch: pytest.MonkeyPatch) -> None:
    from ettweb.rollups import refresh

    _store_unchecked(_good("odd"))
    errors = iter([RuntimeError("first"), RuntimeError("second"), RuntimeError("third")])

    def fails(job_ids: list[str], **kwargs: Any) -> Any:
        raise next(errors)

    monkeypatch.setattr(refresh, "refresh_batch", fails)
    refresh_jobs(["odd"])
    row = ParkedRefresh.objects.get(job="odd")
    assert row.parked_at is None and (row.failures, row.error) == (1, "RuntimeError: third")


def _test_database_env() -> dict[str, str]:
    url = database_url(connection.settings_dict)
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "ettweb.settings.test",
            "ETT_TEST_DATABASE_NAME": ""}


_REFRESHER = """
import django, sys, time
django.setup()
from ettweb.rollups import parking
parking.begin(sys.argv[1:])
print("refreshing", flush=True)
time.sleep(600)
"""


@pytest.fixture
def refresher() -> Iterator[Any]:
    """Start a real process that records itself refreshing jobs, then hangs (a refresh
    running out of memory); the test kills it with SIGKILL."""
    started: list[subprocess.Popen[str]] = []

    def start(*jobs: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", _REFRESHER, *jobs],
                                env=_test_database_env(), stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "refreshing"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _killed(proc: subprocess.Popen[str], pid_of: str) -> None:
    """SIGKILL ``proc`` and wait until Postgres has ended its backend."""
    backend = ParkedRefresh.objects.get(job=pid_of).running_pid
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [backend])
            if cursor.fetchone() == (0,):
                return
            time.sleep(0.05)
    raise AssertionError("the killed refresh's backend is still there")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_refresh_killed_twice_parks_its_job_and_the_group_goes_on(refresher: Any) -> None:
    """A worker killed mid-refresh (SIGKILL, as the OOM killer does) is noticed by the next
    refresh; its jobs are refreshed alone, and the job killed under two refreshes is parked."""
    _store_unchecked(_good("victim"), _good("culprit"))
    _killed(refresher("victim", "culprit"), "culprit")
    # The next refresh counts the death against both and refreshes each alone.
    assert refresh_jobs(["victim", "culprit"]).jobs == 2
    assert not ParkedRefresh.objects.exists()
    # A job whose refresh is killed under two refreshes in a row is parked; its neighbour
    # in the same refresh is refreshed.
    _store_unchecked(_good("culprit-2"))
    _killed(refresher("culprit-2", "victim"), "culprit-2")
    _killed(refresher("culprit-2"), "culprit-2")  # it counted the first death as it began
    assert refresh_jobs(["victim", "culprit-2"]).jobs == 1
    row = ParkedRefresh.objects.get(job="culprit-2")
    assert row.parked_at is not None and row.error == parking.DIED and row.failures == 2
    assert not JobRollup.objects.filter(job="culprit-2").exists()
    assert list(ParkedRefresh.objects.values_list("job", flat=True)) == ["culprit-2"]


@pytest.mark.django_db
def test_pages_and_the_api_say_a_job_is_parked(client: Any) -> None:
    """A parked job's page and API answer say its numbers are not current, and why; a job
    without a parked refresh says nothing of the kind."""
    from django.contrib.auth.models import User

    from ettweb.access.tokens import issue_token

    _store_unchecked(_good("stale"), _heartbeats("new-far", [EPOCH, 1e18]))
    refresh_jobs(["stale", "new-far"])
    user = User.objects.create_user("viewer", password="pw-viewer-1")
    client.force_login(user)
    assert b'id="refresh-parked"' not in client.get("/jobs/stale/").content
    # a restart whose heartbeats run 300,000 years out parks the job that had numbers
    _store_unchecked(_heartbeats("stale", [EPOCH + 2 * HOUR, 1e13], attempt=1))
    refresh_jobs(["stale"])
    for job, heading in (("stale", b"Numbers not current: refresh parked"),
                         ("new-far", b"Not computed: refresh parked")):
        body = client.get(f"/jobs/{job}/").content
        assert b'id="refresh-parked"' in body and heading in body
        assert b"JobOutOfBounds: job window from" in body
    token = issue_token(user, "parked test")
    ready = client.get("/api/v1/jobs/stale", HTTP_AUTHORIZATION=f"Bearer {token}")
    computing = client.get("/api/v1/jobs/new-far", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (ready.status_code, computing.status_code) == (200, 202)
    assert ready.json()["status"] == "ready" and computing.json()["status"] == "computing"
    for answer in (ready, computing):
        assert answer.json()["refresh_parked"].startswith("JobOutOfBounds: job window from")
    retry_refresh(["other"])  # retrying another job leaves these parked
    assert parked(["stale", "new-far"]) == {"stale", "new-far"}


@pytest.mark.django_db
def test_a_rebuild_parks_the_job_it_cannot_do_and_rebuilds_the_rest() -> None:
    from io import StringIO

    from django.core.management import call_command

    _store_unchecked(_good("good-a"), _heartbeats("far", [EPOCH, 1e18]), _good("good-b"))
    ParkedRefresh.objects.create(job="good-a", error="RuntimeError: fixed since", failures=2,
                                 parked_at=timezone.now())  # a rebuild follows a fix
    out, err = StringIO(), StringIO()
    call_command("ett_rebuild_rollups", stdout=out, stderr=err)
    assert out.getvalue().startswith("rebuilt 2 jobs from 6 events:")
    assert err.getvalue().splitlines() == [
        f"parked far: {ParkedRefresh.objects.get(job='far').error}",
        "1 job(s) parked: fix the cause, then retry them (Parked refreshes in the admin)"]
    assert set(JobRollup.objects.values_list("job", flat=True)) == {"good-a", "good-b"}
    assert parked(["far", "good-a", "good-b"]) == {"far"}


@pytest.mark.django_db
def test_admins_see_parked_refreshes_and_retry_them(client: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from django.contrib.auth.models import User

    from ettweb.rollups import admin as rollups_admin

    _store_unchecked(_heartbeats("far", [EPOCH, 1e18]))
    refresh_jobs(["far"])
    sent: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(rollups_admin, "send_once",
                        lambda task, args, within_s: sent.append((task, list(args))) or True)
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-admin-1"))
    listing = client.get("/admin/rollups/parkedrefresh/")
    assert listing.status_code == 200
    assert b"far" in listing.content and b"JobOutOfBounds: job window from" in listing.content
    assert b"Parked refreshes" in client.get("/admin/").content  # where the docs send admins
    response = client.post("/admin/rollups/parkedrefresh/",
                           {"action": "retry", "_selected_action": ["far"]}, follow=True)
    assert response.status_code == 200
    assert b"Retrying the refresh of 1 job(s)." in response.content
    assert sent == [("ett.retry_refresh", [["far"]])]
    assert client.get("/admin/rollups/parkedrefresh/far/change/").status_code == 200
    assert client.post("/admin/rollups/parkedrefresh/far/delete/").status_code == 403


@pytest.mark.django_db
def test_counts_past_64_bits_saturate_instead_of_failing_the_refresh() -> None:
    """Steps up to 2^63 - 1 are valid, so repeated steps (and the completeness check's step
    sums) can pass what a bigint or the chunks' JSON holds: found by the ingest fuzzer, whose
    jobs were parked. The stored counts saturate; the job is refreshed, not parked."""
    b = FleetBuilder()
    for i in range(5):
        b.span("huge-steps", 0, "train", EPOCH + 60 * i, EPOCH + 60 * (i + 1),
               step_start=2**62, step_end=2**63 - 1)
    _store_unchecked(b)
    assert refresh_jobs(["huge-steps"]).jobs == 1
    assert not ParkedRefresh.objects.exists()
    rollup = JobRollup.objects.get(job="huge-steps")
    assert rollup.repeated_steps == 2**63 - 1  # exactly 4 x (2^62 - 1) = 1.8e19 repeated
    assert attribute(b.events).jobs[0].repeated_steps == 4 * (2**62 - 1)  # the offline report
