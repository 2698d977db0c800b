"""Fuzzing ingestion (issue 13): thousands of malformed events and batches, every one refused
with a reason, none crashing the task, the valid events beside them stored.

- ``test_every_malformed_line_is_quarantined_and_its_neighbours_stored``: 500 batches of
  20-30 lines malformed by construction (``fuzz_corpus``: not JSON, not an object, a missing
  field, a wrong type or value, an unknown field, impossible spans, bad marks, values
  Postgres refuses, huge or deeply nested lines, bad UTF-8, spool records with a wrong
  checksum) — over 10,000 lines — each between two valid events, through the worker's own
  ``ingest_lines``.
- ``test_the_task_survives_any_payload``: whatever a publisher puts in the message's
  arguments (not a list, non-string lines, a junk ``source`` or ``auth``), ``ett.ingest_batch``
  returns its three counts and raises nothing — a raise would be an acknowledged task that
  lost its batch, or with a broker redelivery, a loop.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch
from tests.ettweb.ingest.conftest import Signer
from tests.ettweb.ingest.fuzz_corpus import JUNK_VALUES, malformed_batch, valid_mark
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
