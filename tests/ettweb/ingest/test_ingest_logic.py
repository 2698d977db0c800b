"""Ingest logic on real Postgres: valid stored once, invalid quarantined with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from collector.schema import parse_event
from ettweb.ingest.batches import IngestResult, ingest_lines
from ettweb.ingest.models import Event, Job, QuarantinedEvent
from ettweb.rollups.refresh import load_events

LineFactory = Callable[..., str]

pytestmark = pytest.mark.django_db


def test_valid_events_are_stored_as_normalized_schema(worked_example_lines: list[str]) -> None:
    result = ingest_lines(worked_example_lines, source="node-1")
    assert result == IngestResult(stored=len(worked_example_lines), duplicates=0, rejected=0)
    # read back the way the engine reads them (rollups.refresh.load_events)
    stored = {event["id"]: event for event in load_events(["j1"])["j1"]}
    for line in worked_example_lines:
        expected = parse_event(line)
        assert stored[expected["id"]] == expected


def test_invalid_line_is_quarantined_with_reason(event_line: LineFactory) -> None:
    bad = event_line(kind="span", phase="compile", start=10.0, end=5.0)
    result = ingest_lines([bad], source="node-7")
    assert result == IngestResult(stored=0, duplicates=0, rejected=1)
    quarantined = QuarantinedEvent.objects.get()
    assert (quarantined.raw, quarantined.reason, quarantined.source, quarantined.job) == (
        bad, "span end before start", "node-7", "j1")
    assert not Event.objects.exists()


def test_repeated_ids_are_stored_once(worked_example_lines: list[str]) -> None:
    first = ingest_lines(worked_example_lines)
    again = ingest_lines(worked_example_lines + worked_example_lines[:2])
    assert first.stored == len(worked_example_lines)
    assert again == IngestResult(stored=0, duplicates=len(worked_example_lines) + 2, rejected=0)
    assert Event.objects.count() == len(worked_example_lines)


def test_mixed_batch_keeps_the_valid_lines(event_line: LineFactory) -> None:
    good = event_line(kind="mark", mark="heartbeat", ts=5.0, step=3)
    lines = [
        "{not json",
        good,
        event_line(kind="span", phase="train", start=1.0, end=2.0),  # train without steps
        event_line(kind="mark", mark="heartbeat", ts=1.0, host="a\u0000b"),
        event_line(kind="mark", mark="heartbeat", ts=1.0, surprise=1),
        event_line(kind="mark", mark="heartbeat", ts=1.0, step=2**70),
    ]
    result = ingest_lines(lines, source="s")
    assert result == IngestResult(stored=1, duplicates=0, rejected=5)
    assert Event.objects.get().event_id == json.loads(good)["id"]
    reasons = list(QuarantinedEvent.objects.order_by("id").values_list("reason", flat=True))
    assert reasons[0].startswith("bad JSON")
    assert reasons[1] == "missing required field 'step_start'"
    assert reasons[2] == "event.host: NUL character cannot be stored"
    assert reasons[3] == "unknown field(s): surprise"
    assert reasons[4] == "event.step: integer larger than 64 bits"
    assert "\x00" not in QuarantinedEvent.objects.order_by("id")[2].raw


def test_nan_in_attrs_and_deep_nesting_are_rejected(event_line: LineFactory) -> None:
    nan_attrs = event_line(kind="mark", mark="heartbeat", ts=1.0).replace(
        '"attempt":0', '"attempt":0,"attrs":{"loss":NaN}')
    deep = '{"v":1,"id":"d","job":"j1","attempt":0,"kind":"mark","mark":"heartbeat","ts":1,' \
           '"attrs":{"x":' + "[" * 3000 + "]" * 3000 + "}}"
    result = ingest_lines([nan_attrs, deep])
    assert result == IngestResult(stored=0, duplicates=0, rejected=2)
    reasons = set(QuarantinedEvent.objects.values_list("reason", flat=True))
    assert reasons == {"'attrs' is not JSON: Out of range float values are not JSON compliant",
                       "JSON nested too deeply"}


def test_event_the_database_refuses_is_quarantined_alone(
        event_line: LineFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch the database refuses is stored event by event: only the refused event is
    quarantined (with the database's reason), the rest of the batch is kept. Validation
    leaves no known way to such a refusal, so one row is made too long for its column."""
    import ettweb.ingest.batches as logic

    good = [event_line(kind="mark", mark="heartbeat", ts=float(i)) for i in range(3)]
    bad = event_line(kind="mark", mark="heartbeat", ts=9.0, host="refused-host")
    real_row = logic._row

    def row(event: dict[str, object]) -> tuple[object, ...]:
        values = real_row(event)
        return (*values[:10], "x" * 300, *values[11:]) if event.get("host") == "refused-host" \
            else values

    monkeypatch.setattr(logic, "_row", row)
    result = ingest_lines([good[0], bad, *good[1:], good[0]])
    assert result == IngestResult(stored=3, duplicates=1, rejected=1)
    assert Event.objects.count() == 3
    quarantined = QuarantinedEvent.objects.get()
    assert quarantined.raw == bad
    assert quarantined.reason.startswith("database refused the event:")
    assert "too long" in quarantined.reason


def test_attempt_or_rank_beyond_32_bits_is_rejected_not_wrapped(
        event_line: LineFactory) -> None:
    """attempt and rank are 32-bit columns and the COPY is binary: a larger value must be
    refused by name, never stored wrapped around."""
    good = event_line(kind="mark", mark="heartbeat", ts=1.0)
    lines = [event_line(kind="mark", mark="heartbeat", ts=2.0, attempt=2**31),
             event_line(kind="mark", mark="heartbeat", ts=3.0, rank=2**32 + 5)]
    assert ingest_lines([good, *lines]) == IngestResult(stored=1, duplicates=0, rejected=2)
    assert set(QuarantinedEvent.objects.values_list("reason", flat=True)) == {
        "event.attempt: integer larger than 32 bits", "event.rank: integer larger than 32 bits"}
    assert list(Event.objects.values_list("attempt", "rank")) == [(0, 0)]


def test_non_string_lines_are_rejected_not_crashed(event_line: LineFactory) -> None:
    result = ingest_lines([{"v": 1}, None, event_line(kind="mark", mark="heartbeat", ts=1.0)])
    assert result == IngestResult(stored=1, duplicates=0, rejected=2)
    assert set(QuarantinedEvent.objects.values_list("reason", flat=True)) == {
        "line must be a string of JSON"}


def test_job_row_tracks_latest_event_and_metadata(worked_example_lines: list[str],
                                                  event_line: LineFactory) -> None:
    ingest_lines(worked_example_lines)
    job = Job.objects.get(job_id="j1")
    assert (job.last_event_time, job.model, job.team, job.cluster) == (1113.0, "dlrm", "ads", "")
    # A late batch with older events never moves the last event time backwards.
    ingest_lines([event_line(kind="mark", mark="heartbeat", ts=1050.0)])
    job.refresh_from_db()
    assert job.last_event_time == 1113.0
    assert Job.objects.count() == 1


def test_job_metadata_not_given_in_a_later_batch_is_kept(worked_example_lines: list[str],
                                                         event_line: LineFactory) -> None:
    """One upsert statement for all of a batch's jobs: a field the batch does not give (NULL
    in the statement) keeps its stored value; a field it gives replaces it."""
    ingest_lines(worked_example_lines)  # model dlrm, team ads
    ingest_lines([event_line(kind="mark", mark="attempt_start", ts=1200.0, attempt=2,
                             attrs={"team": "search", "cluster": "c7"}),
                  event_line(kind="mark", mark="heartbeat", ts=1201.0, job="j-new")])
    job = Job.objects.get(job_id="j1")
    assert (job.model, job.team, job.cluster, job.last_event_time) == (
        "dlrm", "search", "c7", 1200.0)
    new = Job.objects.get(job_id="j-new")
    assert (new.model, new.team, new.cluster, new.last_event_time) == ("", "", "", 1201.0)


def test_large_batch_is_inserted_in_chunks(event_line: LineFactory) -> None:
    lines = [event_line(kind="mark", mark="heartbeat", ts=float(i), job=f"big{i % 3}")
             for i in range(2500)]
    assert ingest_lines(lines).stored == 2500
    assert Event.objects.count() == 2500
    assert Job.objects.filter(job_id__startswith="big").count() == 3


def test_result_names_every_job_of_the_valid_events(event_line: LineFactory) -> None:
    lines = [event_line(kind="mark", mark="heartbeat", ts=1.0, job=job)
             for job in ("b", "a", "b")]
    first = ingest_lines([*lines, event_line(kind="bogus", job="c")])
    assert first.jobs == ("a", "b")  # sorted, once each; the rejected line's job is not one
    again = ingest_lines(lines)
    assert again.stored == 0 and again.jobs == ("a", "b")  # duplicates still name them
