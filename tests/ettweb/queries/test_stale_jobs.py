"""A running job not heard from for ``ETT_STALE_AFTER_S`` is *stale* (issue 41, part 4): on the
jobs list (a flag, a count, a filter) and on the job page (the job and its running attempt),
judged at the query's ``now``; its status stays ``running`` and no number changes."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings

from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import JobQuery, JobResult, JobsQuery, calculate
from ettweb.queries.job_list import STATUSES
from tests.conftest import mark, span

pytestmark = pytest.mark.django_db

T = datetime(2026, 3, 2, 12, tzinfo=UTC).timestamp()
_ids = itertools.count()


def _lines(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps({"v": 1, "id": f"stale{next(_ids)}", **e}) for e in events]


def _running(job: str, last: float) -> list[dict[str, Any]]:
    """One attempt that trained from T and was last heard at ``last``, with no end."""
    return [mark(job, 0, "attempt_start", T, attrs={"gpus": 2, "team": "ads"}),
            span(job, 0, "train", T, T + 50, step_start=0, step_end=500),
            mark(job, 0, "heartbeat", last, step=600)]


@pytest.fixture
def jobs() -> None:
    """At T + 300: ``gone`` was last heard 200 s ago, ``live`` 30 s ago, ``done`` ended."""
    ingest_batch(_lines(_running("gone", T + 100) + _running("live", T + 270) + [
        mark("done", 0, "attempt_start", T, attrs={"gpus": 2, "team": "ads"}),
        span("done", 0, "train", T, T + 60, step_start=0, step_end=600),
        mark("done", 0, "attempt_end", T + 60, attrs={"status": "completed"})]))


AT = datetime.fromtimestamp(T + 300, UTC)


def _list(**filters: Any) -> dict[str, Any]:
    result = calculate(JobsQuery(now=AT, sort="job", **filters))
    return {"rows": {r.job: r for r in result.jobs}, "stale": result.stale_jobs,
            "result": result}


def test_the_list_flags_a_running_job_not_heard_for_the_setting(jobs: None) -> None:
    listed = _list()
    rows = listed["rows"]
    assert {job: (r.status, r.stale) for job, r in rows.items()} == {
        "done": ("completed", False), "gone": ("running", True), "live": ("running", False)}
    assert rows["gone"].last_heard == datetime.fromtimestamp(T + 100, UTC)
    assert rows["live"].last_heard == datetime.fromtimestamp(T + 270, UTC)
    assert listed["stale"] == 1
    assert listed["result"].stale_after_s == 120.0 and listed["result"].judged_at == AT
    api = listed["result"].as_api()
    assert (api["stale_jobs"], api["stale_after_s"]) == (1, 120.0)
    gone = next(row for row in api["jobs"] if row["job"] == "gone")
    assert gone["stale"] is True and gone["last_heard"].startswith("2026-03-02T12:01:40")


def test_stale_is_a_filter_and_running_keeps_stale_jobs(jobs: None) -> None:
    assert "stale" in STATUSES
    assert list(_list(status="stale")["rows"]) == ["gone"]
    assert list(_list(status="running")["rows"]) == ["gone", "live"]
    assert _list(status="completed")["stale"] == 0  # the count is of the filtered set
    assert _list(status="stale", team="nobody")["rows"] == {}


def test_stale_follows_the_setting_and_the_clock(jobs: None) -> None:
    with override_settings(ETT_STALE_AFTER_S=250.0):
        assert _list()["stale"] == 0
    with override_settings(ETT_STALE_AFTER_S=10.0):
        assert _list()["stale"] == 2
        assert _list(status="stale")["result"].stale_after_s == 10.0
    early = calculate(JobsQuery(now=datetime.fromtimestamp(T + 150, UTC)))
    assert early.stale_jobs == 0


def test_the_job_page_marks_the_job_and_its_running_attempt(jobs: None) -> None:
    gone = calculate(JobQuery("gone", now=AT))
    assert isinstance(gone, JobResult)
    assert gone.stale and gone.last_heard == datetime.fromtimestamp(T + 100, UTC)
    assert [(a.status, a.stale) for a in gone.headline.attempts] == [("running", True)]
    api = gone.as_api()
    assert api["stale"] is True and api["attempts"][0]["stale"] is True
    assert api["last_heard"].startswith("2026-03-02T12:01:40")
    live = calculate(JobQuery("live", now=AT))
    assert isinstance(live, JobResult) and not live.stale
    assert not live.headline.attempts[0].stale
    done = calculate(JobQuery("done", now=datetime.fromtimestamp(T + 9999, UTC)))
    assert isinstance(done, JobResult) and not done.stale and not done.headline.attempts[0].stale


def test_staleness_changes_no_number(jobs: None) -> None:
    stale = calculate(JobQuery("gone", now=AT))
    fresh = calculate(JobQuery("gone", now=datetime.fromtimestamp(T + 101, UTC)))
    assert isinstance(stale, JobResult) and isinstance(fresh, JobResult)
    assert stale.stale and not fresh.stale
    # Only the attempt's flag differs: every number is the same.
    assert replace(stale.headline, attempts=fresh.headline.attempts) == fresh.headline
    assert [replace(a, stale=False) for a in stale.headline.attempts] == \
        fresh.headline.attempts
    assert stale.headline.ett_pct == fresh.headline.ett_pct > 0


def test_an_end_that_arrives_ends_the_staleness(jobs: None) -> None:
    ingest_batch(_lines([mark("gone", 0, "attempt_end", T + 101,
                              attrs={"status": "cancelled"})]))
    gone = calculate(JobQuery("gone", now=AT))
    assert isinstance(gone, JobResult) and not gone.stale
    assert [(a.status, a.stale) for a in gone.headline.attempts] == [("cancelled", False)]
    assert _list()["stale"] == 0 and "gone" in _list(status="cancelled")["rows"]


def test_an_event_stored_before_its_refresh_already_counts_as_heard(jobs: None) -> None:
    """Last heard comes from ingestion's job row, moved by every batch: a heartbeat whose
    rollup refresh has not run yet (ingest_lines refreshes nothing) makes the job live."""
    ingest_lines(_lines([mark("gone", 0, "heartbeat", T + 290, step=700)]))
    listed = _list()
    assert not listed["rows"]["gone"].stale and listed["stale"] == 0
    assert listed["rows"]["gone"].last_heard == datetime.fromtimestamp(T + 290, UTC)


def test_a_last_heard_time_no_datetime_can_hold_reads_as_unknown() -> None:
    """A job with an event past year 9999 (parked, its pages still shown) has no last-heard
    time to show, rather than a 500."""
    from ettweb.queries import liveness

    assert liveness.as_time(1e18) is None and liveness.as_time(-1e18) is None
    assert liveness.as_time(0.0) is not None and liveness.as_time(None) is None
