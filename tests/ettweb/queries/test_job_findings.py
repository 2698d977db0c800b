"""``JobQuery`` carries the completeness check's findings, as stored by the real import and
refresh path: the same findings as the check run on the job's events, kept exact when the
job arrives in parts (the chunked refresh folds each chunk's facts), and "not checked" (not
"complete") for a job whose chunks were summed up before the check existed."""

from __future__ import annotations

import pytest

from ettweb.attribution.completeness import check_job
from ettweb.ingest.imports import import_lines, refresh_imported
from ettweb.queries import JobQuery, calculate
from ettweb.queries.job_detail import FindingRow, JobResult
from ettweb.rollups.models import AttributionChunk, JobRollup
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.completeness_events import paused, restarted, slow_first

pytestmark = pytest.mark.django_db


def stored(*timelines: Timeline) -> None:
    lines = [line for t in timelines for line in t.lines()]
    summary = import_lines(lines, source="import:test")
    refresh_imported(summary.jobs)


def job(name: str) -> JobResult:
    result = calculate(JobQuery(job=name))
    assert isinstance(result, JobResult)
    return result


def test_the_query_carries_each_jobs_findings() -> None:
    stored(worked_example(), restarted(), slow_first(70.0))
    assert job("j1").instrumentation == ()  # checked, nothing missing
    (resumed,) = job("restarted").instrumentation or ()
    assert resumed == FindingRow(
        kind="checkpoint_load_missing", attempt=1, seconds=pytest.approx(40.0), step=600,
        before="", after="",
        message="Attempt 1: checkpoint_load looks missing: 40 s unattributed before training "
                "resumed at step 600",
        advice=resumed.advice)
    (folded,) = job("slow").instrumentation or ()
    assert folded.kind == "compile_folded" and folded.seconds == pytest.approx(60.0)
    assert "0.1 s/step" in folded.message


def test_a_job_stored_in_parts_gets_the_findings_of_its_whole() -> None:
    """Six train spans with unrecorded pauses over three UTC days (a chunk lies in one day),
    refreshed after each half: the stored facts fold over chunks refreshed at different
    times."""
    t = paused(1000.0, pauses=5, span_s=30_000.0, job="parts")
    events = list(t.events)
    middle = len(events) // 2
    for part in (events[:middle], events[middle:]):
        t.events = part
        stored(t)
    assert AttributionChunk.objects.filter(job="parts").count() > 2
    expected = check_job(events)
    assert [f.kind for f in expected] == ["unattributed_gap"] and expected[0].gaps == 5
    (found,) = job("parts").instrumentation or ()
    assert (found.kind, found.attempt, found.before, found.after) == (
        "unattributed_gap", 0, "train", "train")
    assert found.seconds == pytest.approx(expected[0].seconds)
    assert found.message == expected[0].message


def test_chunks_from_before_the_check_leave_the_job_not_checked_until_rebuilt() -> None:
    stored(restarted())
    for chunk in AttributionChunk.objects.filter(job="restarted"):
        chunk.summary = {a: {k: v for k, v in s.items() if k != "ph"}
                         for a, s in chunk.summary.items()}
        chunk.save()
    refresh_jobs(["restarted"])  # nothing dirty: the stored summaries are folded
    assert JobRollup.objects.get(job="restarted").instrumentation is None
    assert job("restarted").instrumentation is None
    refresh_jobs(["restarted"], whole=True)  # what ett_rebuild_rollups does
    assert [f.kind for f in job("restarted").instrumentation or ()] == [
        "checkpoint_load_missing"]
