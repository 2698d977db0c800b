"""A real worker refuses pickle and yaml messages (issue 13) and keeps storing JSON ones.

Settings say ``CELERY_ACCEPT_CONTENT = ["json"]`` (tests/ettweb/test_security.py checks
that); this proves the running worker honours it. Each refused message is a correctly signed
``ett.ingest_batch`` that a worker accepting the format would store, and one pickle carries
a payload that creates a file when unpickled: nothing may be stored and the file must not
appear. The worker runs as in tests/ettweb/test_faults.py: the test database, the test
broker, a private queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from collector.auth import sign_batch
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.settings.env import database_url
from tests.ettweb.broker_queues import delete_queue
from tests.ettweb.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
T0 = time.time() - 3600.0
#: What Celery logs for a message in a format it does not accept.
REFUSED = "Received invalid task message: Refusing to deserialize untrusted content of type"


class CreatesFileWhenUnpickled:
    """Unpickling this calls ``open(path, "w")``: proof that a pickle ran code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _lines(job: str, count: int = 3) -> list[str]:
    """Heartbeat events of one job, ids unique."""
    return [json.dumps({"v": 1, "id": f"{job}-{i}", "job": job, "attempt": 0, "kind": "mark",
                        "mark": "heartbeat", "ts": T0 + i}) for i in range(count)]


@pytest.fixture
def queue() -> Iterator[str]:
    name = f"ett-serializer-{uuid.uuid4().hex[:8]}"
    yield name
    delete_queue(Celery(broker=settings.CELERY_BROKER_URL), name)


def _start_worker(queue: str, log: Path) -> subprocess.Popen[bytes]:
    environ = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test", PYTHONUNBUFFERED="1",
                   DATABASE_URL=database_url(connection.settings_dict),
                   CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL))
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", queue,
             "-n", f"serializers-{queue}@%h", "--concurrency", "1", "--pool", "prefork",
             "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
             "--without-gossip"], cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT)


def test_the_worker_refuses_pickle_and_yaml_and_stores_json(queue: str, tmp_path: Path) -> None:
    credential = new_credential(f"serializers-{queue}")
    publisher = Celery(broker=settings.CELERY_BROKER_URL)
    # The publisher may send anything (a sender's accept_content does not limit what it sends).
    publisher.conf.update(accept_content=["json", "pickle", "yaml"])
    run = uuid.uuid4().hex[:6]
    marker = tmp_path / "unpickled"

    def publish(job: str, serializer: str, *extra: object) -> None:
        lines = _lines(job)
        auth = sign_batch(credential.collector_id, credential.secret, lines)
        publisher.send_task("ett.ingest_batch", args=(lines, "serializer-test", auth, *extra),
                            queue=queue, serializer=serializer)

    publish(f"pickle-{run}", "pickle")
    publish(f"pickle-code-{run}", "pickle", CreatesFileWhenUnpickled(marker))
    publish(f"yaml-{run}", "yaml")
    publish(f"json-{run}", "json")  # after the refused ones: the worker got past them

    log = tmp_path / "worker.log"
    worker = _start_worker(queue, log)

    def tail() -> str:
        return log.read_text()[-4000:]

    try:
        wait_until(lambda: Event.objects.filter(job=f"json-{run}").count() == 3, 120, tail)
        assert worker.poll() is None, "the worker died"
        for job in (f"pickle-{run}", f"pickle-code-{run}", f"yaml-{run}"):
            assert not Event.objects.filter(job=job).exists(), job
        assert not QuarantinedEvent.objects.exists()
        assert not marker.exists(), "the worker unpickled the message"
        # Still alive and still storing after the refusals.
        publish(f"json-after-{run}", "json")
        wait_until(lambda: Event.objects.filter(job=f"json-after-{run}").count() == 3, 60, tail)
        # Each refused once, with the reason (rejected, not requeued to be refused again).
        text = log.read_text()
        assert text.count(f"{REFUSED} pickle (application/x-python-serialize)") == 2, text
        assert text.count(f"{REFUSED} yaml (application/x-yaml)") == 1, text
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
