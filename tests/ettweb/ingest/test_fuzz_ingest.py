"""Fuzzing ingestion (issue 13): thousands of malformed events and batches, every one refused
with a reason, none crashing the task, the valid events beside them stored.

- ``test_every_malformed_line_is_quarantined_and_its_neighbours_stored``: 500 batches of
  20-30 lines malformed by construction (``bench.fuzz_stages.corpus``: not JSON, not an
  object, a missing field, a wrong type or value, an unknown field, impossible spans, bad
  marks, values Postgres refuses, huge or deeply nested lines, bad UTF-8, spool records with
  a wrong checksum, times out of the ingestion window, broken Unicode in any
  string field) — over 10,000 lines — each between two valid events, through the worker's
  own ``ingest_lines``.
- ``test_any_batch_keeps_its_books_through_the_task`` and ``test_any_spool_file_keeps_its_books``
  (issue 40): whole batches drawn by ``bench.fuzz_stages.strategies`` (extreme but valid
  events, every kind of broken Unicode, out-of-window and out-of-range numbers, huge and
  nested attrs, duplicate ids), through the task or a spool file: every valid event stored
  once, every invalid line quarantined with a reason, each duplicate counted, the next batch
  fine. ``test_a_big_batch_stays_within_its_memory`` bounds the allocations of a big one.
- ``test_the_task_survives_any_payload``: whatever a publisher puts in the message's
  arguments (not a list, non-string lines, a junk ``source`` or ``auth``), ``ett.ingest_batch``
  returns its three counts and raises nothing — a raise would be an acknowledged task that
  lost its batch, or with a broker redelivery, a loop.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_stages.corpus import JUNK_VALUES, malformed_batch, valid_mark
from bench.fuzz_stages.strategies import Fuzzed, batches, spool_file
from collector.spool_reader import read_records
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.ingest.conftest import Signer
from tests.examples import examples

pytestmark = pytest.mark.django_db
FUZZ = settings(max_examples=examples(500), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def _neighbour(job: str) -> str:
    event = valid_mark(random.Random(), job=job)
    event["id"] = uuid.uuid4().hex  # unique across examples: hypothesis replays its randoms
    return json.dumps(event)


@FUZZ
@given(rng=st.randoms(use_true_random=False), size=st.integers(20, 30))
def test_every_malformed_line_is_quarantined_and_its_neighbours_stored(
        rng: random.Random, size: int) -> None:
    job = f"fuzz-{uuid.uuid4().hex[:10]}"
    bad = malformed_batch(rng, size)
    lines: list[Any] = [_neighbour(job), *bad, _neighbour(job)]
    before = QuarantinedEvent.objects.count()
    result = ingest_lines(lines, "fuzz")
    assert (result.stored, result.duplicates, result.rejected) == (2, 0, size), bad
    assert Event.objects.filter(job=job).count() == 2
    rows = list(QuarantinedEvent.objects.order_by("-id")[:size])
    assert QuarantinedEvent.objects.count() == before + size
    assert all(row.reason.strip() for row in rows)  # each with a reason in words


@st.composite
def payloads(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    junk = st.sampled_from(JUNK_VALUES)
    rng = draw(st.randoms(use_true_random=False))
    lines = draw(st.one_of(
        st.lists(st.one_of(st.just(None), junk, st.text(max_size=50),
                           st.builds(lambda: json.dumps(valid_mark(rng)))), max_size=12),
        junk, st.dictionaries(st.text(max_size=5), junk, max_size=3)))
    source = draw(st.one_of(st.text(max_size=300), junk))
    auth = draw(st.one_of(
        st.none(), junk,
        st.fixed_dictionaries({}, optional={
            "collector": st.one_of(st.text(max_size=70), junk),
            "ts": st.one_of(st.floats(allow_nan=True), junk),
            "nonce": st.one_of(st.text(max_size=40), junk),
            "sig": st.one_of(st.text(max_size=70), junk)})))
    return lines, source, auth


@FUZZ
@given(payload=payloads())
def test_the_task_survives_any_payload(payload: tuple[Any, Any, Any]) -> None:
    lines, source, auth = payload
    result = ingest_batch.apply(args=(lines, source, auth)).get()
    sent = len(lines) if isinstance(lines, list) else 1
    assert set(result) == {"stored", "duplicates", "rejected", "expired"}
    assert sum(result.values()) == sent
    assert result["stored"] == 0  # none of these is signed: nothing may be stored


@settings(max_examples=examples(150), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), size=st.integers(1, 15))
def test_a_signed_batch_of_junk_keeps_its_valid_events(rng: random.Random, size: int,
                                                       sign: Signer) -> None:
    """Authentic but broken (a buggy trainer behind a good agent): the valid events of the
    batch are stored, every broken line quarantined with a reason."""
    job = f"signed-{uuid.uuid4().hex[:10]}"
    lines: list[Any] = [_neighbour(job), *malformed_batch(rng, size), _neighbour(job)]
    text_lines = [line.decode("utf-8", "replace") if isinstance(line, bytes) else line
                  for line in lines]  # a Celery JSON message carries text
    result = ingest_batch.apply(args=(text_lines, "fuzz", sign(text_lines))).get()
    assert result["stored"] == 2 and Event.objects.filter(job=job).count() == 2
    assert result["rejected"] + result["duplicates"] == size


# --------------------------------------------------------------------------- issue 40, part 3
#: The short profile (``make test``): whole batches drawn by Hypothesis through the real task
#: against Postgres. ``python -m bench.fuzz_ingest --profile long`` runs the long one against
#: a real worker (jobs of 10^6 events, batches of 50 MiB).
SHORT = settings(max_examples=examples(60), deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.large_base_example])
#: Seconds one short-profile batch may take to store (they take tens of milliseconds).
BATCH_SECONDS = 10.0


def _books_hold(batch: Fuzzed, result: dict[str, int], quarantined_before: int) -> None:
    """Every valid event stored exactly once under its job, every invalid line quarantined
    with a reason, every repeated id counted as a duplicate."""
    assert result["stored"] == len(batch.valid), result
    assert result["duplicates"] == batch.duplicates, result
    assert result["rejected"] == batch.invalid, result
    stored = Counter(Event.objects.filter(event_id__in=list(batch.valid))
                     .values_list("event_id", "job"))
    assert stored == Counter(batch.valid.items())  # each once, under its own job
    rows = list(QuarantinedEvent.objects.filter(id__gt=quarantined_before))
    assert len(rows) == batch.invalid
    assert all(row.reason.strip() for row in rows)


def _next_batch_is_fine() -> None:
    job = f"next-{uuid.uuid4().hex[:8]}"
    assert ingest_lines([_neighbour(job), _neighbour(job)]).stored == 2


def _last_quarantined() -> int:
    return QuarantinedEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


@SHORT
@given(data=st.data())
def test_any_batch_keeps_its_books_through_the_task(data: st.DataObject, sign: Signer) -> None:
    """Signed whole batches (a Celery JSON message carries text: bytes lines arrive decoded)
    through ``ett.ingest_batch``: the books hold, in bounded time, and the next batch is
    stored normally."""
    batch = data.draw(batches(uuid.uuid4().hex[:12]))
    batch.lines = [line.decode("utf-8", "replace") if isinstance(line, bytes) else line
                   for line in batch.lines]
    before = _last_quarantined()
    started = time.monotonic()
    result = ingest_batch.apply(args=(batch.lines, "fuzz", sign(batch.lines))).get()
    assert time.monotonic() - started < BATCH_SECONDS
    _books_hold(batch, result, before)
    _next_batch_is_fine()


@SHORT
@given(data=st.data())
def test_any_spool_file_keeps_its_books(data: st.DataObject) -> None:
    """The same batches written as a collector segment and read back through the agent's
    reader (``collector.spool_reader``): every record intact, and the books hold."""
    batch = data.draw(batches(uuid.uuid4().hex[:12]))
    with tempfile.TemporaryDirectory() as directory:
        path = spool_file(batch, Path(directory))
        records = list(read_records(path))
    assert all(problem is None for _, _, problem in records)
    lines = [payload for _, payload, _ in records if payload is not None]
    assert len(lines) == len(batch.lines)
    before = _last_quarantined()
    result = ingest_lines(lines, "fuzz-spool")
    _books_hold(batch, {**result.as_dict()}, before)


@settings(max_examples=examples(6), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_a_big_batch_stays_within_its_memory(data: st.DataObject) -> None:
    """A batch of thousands of lines (a drawn batch 100 times over, huge attrs among them):
    Python's allocations while it is stored stay within a bound proportional to its size
    (tracemalloc's peak), and its books hold."""
    batch = data.draw(batches(uuid.uuid4().hex[:12], max_valid=40)).replicated(100)
    size = batch.size
    tracemalloc.start()
    try:
        result = ingest_lines(batch.lines, "fuzz-big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.stored, result.rejected) == (len(batch.valid), batch.invalid)
    assert result.duplicates == batch.duplicates
    assert peak < 16 * 2**20 + 30 * size, (peak, size)
