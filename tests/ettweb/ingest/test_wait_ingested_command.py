"""``ett_wait_ingested`` returns once enough lines are in and the rollups are current, and
fails clearly on timeout, saying which of the two it still waits for."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ettweb.ingest.batches import ingest_lines
from ettweb.rollups.refresh import refresh_jobs

pytestmark = pytest.mark.django_db


def test_returns_when_lines_are_ingested_and_rollups_refreshed(
        worked_example_lines: list[str]) -> None:
    refresh_jobs(ingest_lines([*worked_example_lines, "{bad"]).jobs)
    out = StringIO()
    call_command("ett_wait_ingested", events=len(worked_example_lines) + 1, timeout=1, stdout=out)
    assert out.getvalue().strip() == (f"ingested {len(worked_example_lines)} events, "
                                      "1 quarantined; rollups current")


def test_waits_for_the_rollup_refresh_of_a_stored_job(worked_example_lines: list[str]) -> None:
    result = ingest_lines(worked_example_lines)  # stored, marked dirty, refresh not yet run
    assert result.refresh == ("j1",)
    with pytest.raises(CommandError, match=r"all 12 lines are in, but 1 job\(s\) still wait"):
        call_command("ett_wait_ingested", events=len(worked_example_lines), timeout=0.1)


def test_times_out_with_counts() -> None:
    with pytest.raises(CommandError, match=r"timed out: 0 stored \+ 0 quarantined < 3 lines"):
        call_command("ett_wait_ingested", events=3, timeout=0.1)


def test_job_counts_only_that_jobs_lines(worked_example_lines: list[str],
                                         one_gpu_job_lines: list[str]) -> None:
    """Other jobs' events (a simulated fleet) must not satisfy the wait for a new job."""
    refresh_jobs(ingest_lines(worked_example_lines).jobs)  # j1: 12 events
    with pytest.raises(CommandError, match=r"timed out: 0 stored \+ 0 quarantined < 3 lines"):
        call_command("ett_wait_ingested", events=3, job="j2", timeout=0.1)
    refresh_jobs(ingest_lines(one_gpu_job_lines).jobs)  # j2: 3 events
    out = StringIO()
    call_command("ett_wait_ingested", events=3, job="j2", timeout=1, stdout=out)
    assert out.getvalue().strip() == "ingested 3 events, 0 quarantined; rollups current"


def test_event_ids_are_waited_for_even_when_the_count_is_reached(
        worked_example_lines: list[str]) -> None:
    """The demo counts the lines its spool still holds, fewer than were shipped once the
    collector deleted shipped segments: the job's ``attempt_end`` is waited for by id."""
    first, last = worked_example_lines[:-1], worked_example_lines[-1]
    refresh_jobs(ingest_lines(first).jobs)
    end_id = json.loads(last)["id"]
    with pytest.raises(CommandError, match=r"timed out: 1 of the events named by --event-id"):
        call_command("ett_wait_ingested", events=1, event_ids=[end_id], timeout=0.1)
    refresh_jobs(ingest_lines([last]).jobs)
    out = StringIO()
    call_command("ett_wait_ingested", events=1, event_ids=[end_id], timeout=1, stdout=out)
    assert out.getvalue().strip().endswith("rollups current")
