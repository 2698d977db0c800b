"""A batch's valid events survive any line (issue 40, part 2).

- Text is made storable before anything is written: a lone surrogate or a NUL in any string
  field quarantines its line with the field named, and the quarantine row itself is always
  storable. The issue's line (``"job": "agentpath-\\ud800"``, a JSON escape) made the row
  fail to encode and lost its 7 neighbours.
- A failure storing the batch is isolated to the events at fault (savepoints, by halves);
  a quarantine row the database refuses is stored in ASCII; a batch that fails every time
  is parked whole in the quarantine after ``STORE_TRIES`` tries, never acknowledged lost.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

import ettweb.ingest.batches as batches
import ettweb.ingest.quarantine as quarantine
import ettweb.ingest.tasks as tasks
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.ingest.quarantine import PARKED, save_quarantined
from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.ingest.conftest import Signer

pytestmark = pytest.mark.django_db
T0 = time.time() - 3600


def _valid(job: str, count: int) -> list[str]:
    return [json.dumps({"v": 1, "id": f"{job}-{i}", "job": job, "attempt": 0, "kind": "mark",
                        "mark": "heartbeat", "ts": T0 + i}) for i in range(count)]


#: The issue's line: valid but for its job id, which holds a lone surrogate as a JSON escape.
SURROGATE_JOB = ('{"v": 1, "id": "bad-1", "job": "agentpath-\\ud800", "attempt": 0, '
                 f'"kind": "mark", "mark": "heartbeat", "ts": {T0}}}')


@pytest.mark.parametrize("as_text", ["escaped", "decoded"])
def test_issue_40_a_surrogate_job_no_longer_loses_the_batch(sign: Signer, as_text: str) -> None:
    """7 valid events and the issue's line, signed, through the task: 7 stored, 1 quarantined
    with the field named and its job id stored in a form Postgres takes. ``decoded``: the
    line as a Celery JSON message may hand it over, the surrogate a real character."""
    bad = SURROGATE_JOB if as_text == "escaped" else SURROGATE_JOB.replace("\\ud800", "\ud800")
    lines = [*_valid("agentpath", 4), bad, *_valid("other", 3)]
    # A line holding a real surrogate cannot be signed (it has no UTF-8): in-process, unsigned.
    result = ingest_batch(lines, "node-1", sign(lines) if as_text == "escaped" else None)
    assert result == {"stored": 7, "duplicates": 0, "rejected": 1, "expired": 0}
    assert Event.objects.count() == 7
    row = QuarantinedEvent.objects.get()
    assert row.reason == "event.job: invalid unicode (lone surrogate)"
    assert row.job == "agentpath-\\ud800"
    assert row.raw == SURROGATE_JOB


@pytest.mark.parametrize(("field", "value", "named"), [
    ("job", "j\\u0000", "event.job: NUL character"),
    ("host", "h\\udfff", "event.host: invalid unicode"),
    ("id", "i\\udbff", "event.id: invalid unicode"),
    ("attrs", {"KEY": 1}, "event.attrs: invalid unicode"),
    ("attrs", {"k": "v\\u0000"}, "event.attrs.k: NUL character"),
])
def test_a_bad_character_in_any_string_field_quarantines_its_line(
        field: str, value: Any, named: str) -> None:
    event = {"v": 1, "id": "odd", "job": "odd-job", "attempt": 0, "kind": "mark",
             "mark": "heartbeat", "ts": T0, field: value}
    line = json.dumps(event).replace("KEY", "k\\ud800").replace("\\\\u", "\\u")
    result = ingest_lines([*_valid("fine", 2), line])
    assert (result.stored, result.rejected) == (2, 1)
    row = QuarantinedEvent.objects.get()
    assert row.reason.startswith(named), row.reason
    row.refresh_from_db()  # stored and read back whole
    assert row.raw == line


def test_an_unexpected_error_storing_one_event_quarantines_that_event_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault injected for one event of 64 (a RuntimeError, no database refusal): the other
    63 are stored, the one is quarantined with the error, in about 2·log2(64) tries."""
    real_row, tries = batches._row, []
    real_store = batches._store

    def row(event: dict[str, Any]) -> tuple[Any, ...]:
        if event["id"] == "many-17":
            raise RuntimeError("injected fault")
        return real_row(event)

    def store(events: Any) -> int:
        tries.append(len(events))
        return real_store(events)

    monkeypatch.setattr(batches, "_row", row)
    monkeypatch.setattr(batches, "_store", store)
    lines = _valid("many", 64)
    result = ingest_lines(lines)
    assert (result.stored, result.duplicates, result.rejected) == (63, 0, 1)
    assert set(Event.objects.values_list("event_id", flat=True)) == {
        f"many-{i}" for i in range(64)} - {"many-17"}
    row_ = QuarantinedEvent.objects.get()
    assert row_.raw == lines[17]
    assert row_.reason == "storing the event failed: RuntimeError: injected fault"
    assert len(tries) == 1 + 2 * 6  # the whole, then two halves a level


def test_a_quarantine_row_the_database_refuses_is_kept_in_ascii() -> None:
    """A row built by hand with a NUL (every row the worker builds is made storable): the
    database refuses it, so it is stored in ASCII, beside the rows it came with."""
    fine = quarantine.reject("not json", "bad JSON", "node")
    refused = QuarantinedEvent(raw="nul\x00here", raw_bytes=8, reason="why\x00", source="n")
    save_quarantined([fine, refused])
    rows = {row.raw: row for row in QuarantinedEvent.objects.all()}
    assert set(rows) == {"not json", "'nul\\x00here'"}
    assert rows["'nul\\x00here'"].reason.startswith("'why\\x00 (kept as ASCII: ")


def test_a_batch_that_fails_once_is_stored_on_the_next_try(
        monkeypatch: pytest.MonkeyPatch, sign: Signer) -> None:
    real, calls = batches.mark_chunks, []

    def flaky(events: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        real(events)

    monkeypatch.setattr(batches, "mark_chunks", flaky)
    monkeypatch.setattr(tasks.time, "sleep", lambda s: None)
    lines = _valid("flaky", 5)
    assert ingest_batch(lines, "node-1", sign(lines))["stored"] == 5
    assert len(calls) == 2 and not QuarantinedEvent.objects.exists()


def test_a_batch_that_always_fails_is_parked_whole_not_lost(
        monkeypatch: pytest.MonkeyPatch, sign: Signer) -> None:
    """Failing as a whole every time (here: marking its chunks), the batch is tried
    STORE_TRIES times in place and then parked: every line whole in the quarantine, the
    reason naming the error; the task returns instead of raising (a raise would be
    acknowledged with the batch gone)."""
    def broken(events: Any) -> None:
        raise RuntimeError("chunks broken")

    waits: list[float] = []
    monkeypatch.setattr(batches, "mark_chunks", broken)
    monkeypatch.setattr(tasks.time, "sleep", waits.append)
    long_line = json.dumps({"v": 1, "id": "long", "job": "parked", "attempt": 0,
                            "kind": "mark", "mark": "heartbeat", "ts": T0,
                            "attrs": {"note": "n" * 7000}})
    lines = [*_valid("parked", 3), long_line]
    result = ingest_batch.apply(args=(lines, "node-1", sign(lines))).get()
    assert result == {"stored": 0, "duplicates": 0, "rejected": 4, "expired": 0}
    assert waits == list(tasks.STORE_RETRY_WAITS_S)
    assert not Event.objects.exists()
    rows = list(QuarantinedEvent.objects.order_by("id"))
    assert [row.raw for row in rows] == lines  # whole, the long one too
    assert all(row.reason.startswith(f"{PARKED}: the batch could not be stored after 3 tries "
                                     "(RuntimeError: chunks broken)") for row in rows)


def test_a_batch_the_quarantine_refuses_too_is_written_to_the_log(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("nothing stores")

    monkeypatch.setattr(quarantine, "save_quarantined", broken)
    lines = ["line-one", "line-\ud800"]
    with caplog.at_level(logging.CRITICAL, logger="ettweb.ingest.quarantine"):
        quarantine.park_batch(lines, "node", RuntimeError("first cause"), 3)
    logged = [record.getMessage() for record in caplog.records]
    assert "parked line 1/2 from 'node': 'line-one'" in logged
    assert "parked line 2/2 from 'node': 'line-\\\\ud800'" in logged


def test_a_connection_error_is_not_parked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost connection is the database's, not the batch's: it propagates to
    ``waits_for_database``, which retries without limit; nothing is parked."""
    from django.db import OperationalError

    def lost(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(tasks, "ingest_lines", lost)
    with pytest.raises(OperationalError):
        tasks._ingest_or_park(_valid("conn", 2), "node", None)
    assert not QuarantinedEvent.objects.exists()
