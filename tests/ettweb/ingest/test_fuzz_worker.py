"""The fuzz corpus through a real worker and (a private) Redis (issue 13): 200 batches of
junk with valid events between, most signed, some not. The worker must store every valid event once,
quarantine (or count) every bad line, raise on none — a raise is an acknowledged task whose
batch is gone, or with a redelivery, a loop — and be idle and alive at the end."""

from __future__ import annotations

import json
import random
import time
import uuid

import pytest
from django.db.models import Sum

from bench.fuzz_stages.corpus import malformed_batch, valid_mark
from ettweb.ingest.models import Event, QuarantinedEvent
from tests.ettweb.worker_fleet import Workers

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
BATCHES, SIGNED_SHARE = 200, 0.8


def _text(line: str | bytes) -> str:
    return line.decode("utf-8", "replace") if isinstance(line, bytes) else line


def test_a_worker_digests_the_fuzz_corpus(workers: Workers) -> None:
    rng = random.Random(20261201)
    job = f"fuzzw-{uuid.uuid4().hex[:8]}"
    valid = bad = 0
    worker = workers.start("fuzz")
    for _ in range(BATCHES):
        lines = [_text(line) for line in malformed_batch(rng, rng.randint(1, 25))]
        good = [json.dumps({**valid_mark(rng, job=job), "id": uuid.uuid4().hex})
                for _ in range(2)]
        batch = [good[0], *lines, good[1]]
        if rng.random() < SIGNED_SHARE:
            workers.publish(batch)
            valid, bad = valid + 2, bad + len(lines)
        else:  # unsigned: refused whole, every line counted
            workers.send(batch, "fuzz", None)
            bad += len(batch)
    deadline = time.monotonic() + 240

    def quarantined() -> int:
        return int(QuarantinedEvent.objects.aggregate(n=Sum("lines"))["n"] or 0)

    while time.monotonic() < deadline and (Event.objects.filter(job=job).count() < valid
                                           or quarantined() < bad):
        time.sleep(0.5)
    assert Event.objects.filter(job=job).count() == valid, workers.logs()
    assert quarantined() == bad, workers.logs()
    log = (workers.tmp_path / "fuzz.log").read_text(errors="replace")
    assert "raised unexpected" not in log and "Traceback" not in log
    assert log.count("succeeded") >= BATCHES  # every message acknowledged once
    assert worker.poll() is None  # still alive
