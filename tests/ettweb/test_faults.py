"""Fault tests with real processes on the real broker and Postgres, each ending in an exact
count: two workers consuming one queue (and refreshing the job's rollups), a worker's pool
process killed mid-batch, the worker's database connections cut. Every event is stored
exactly once. (A real Postgres restart is in test_postgres_restart.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection, transaction

from collector.auth import sign_batch
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import Event, EventId, QuarantinedEvent
from ettweb.rollups.models import DirtyJob, JobRollup
from ettweb.settings.env import database_url
from tests.ettweb.broker_queues import delete_queue
from tests.ettweb.waiting import a_session_waits_on_a_lock, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
T0 = time.time() - 3600.0


def _batches(job: str, batches: int, size: int) -> list[list[str]]:
    """Heartbeat events of one job, ``batches`` lists of ``size`` lines, ids unique."""
    return [[json.dumps({"v": 1, "id": f"{job}-{b}-{i}", "job": job, "attempt": 0,
                         "kind": "mark", "mark": "heartbeat", "ts": T0 + b + i / size})
             for i in range(size)] for b in range(batches)]


class Fleet:
    """Worker processes on a private queue, and a signing publisher for it."""

    def __init__(self, tmp_path: Path) -> None:
        self.queue = f"ett-fault-{uuid.uuid4().hex[:8]}"
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []
        self.credential = new_credential(f"fault-{self.queue}")
        self.app = Celery(broker=settings.CELERY_BROKER_URL)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test",
                        DATABASE_URL=database_url(connection.settings_dict), PYTHONUNBUFFERED="1",
                        CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL))

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", self.queue,
             "-n", f"{name}-{self.queue}@%h", "--concurrency", "1", "--pool", "prefork",
             "--loglevel", "INFO",
             "--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def publish(self, lines: list[str]) -> None:
        auth = sign_batch(self.credential.collector_id, self.credential.secret, lines)
        self.app.send_task("ett.ingest_batch", args=(lines, "fault-test", auth),
                           queue=self.queue)

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in self.tmp_path.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        delete_queue(self.app, self.queue)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    running = Fleet(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _stored(job: str) -> int:
    return Event.objects.filter(job=job).count()


def _pool_children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in children.read_text().split()] if children.exists() else []


def test_two_workers_store_overlapping_batches_exactly_once(fleet: Fleet) -> None:
    job = f"two-{uuid.uuid4().hex[:6]}"
    batches = _batches(job, 20, 200)
    for worker in ("a", "b"):
        fleet.start_worker(worker)
    for batch in batches + batches[::2]:  # every other batch sent twice (fresh signatures)
        fleet.publish(batch)
    wait_until(lambda: _stored(job) == 20 * 200, 120, fleet.logs)
    time.sleep(2.0)  # the resent batches drain as duplicates
    assert _stored(job) == 20 * 200
    assert Event.objects.filter(job=job).values("event_id").distinct().count() == 20 * 200
    assert not QuarantinedEvent.objects.exists()
    for worker in ("a", "b"):  # both took batches: they really ran concurrently
        assert "succeeded" in (fleet.tmp_path / f"{worker}.log").read_text()
    # The debounced refreshes the workers scheduled leave the job's rollup exact.
    wait_until(lambda: not DirtyJob.objects.exists(), 60, fleet.logs)
    assert JobRollup.objects.get(job=job).events == 20 * 200


def test_worker_killed_mid_batch_loses_nothing(fleet: Fleet) -> None:
    job = f"kill-{uuid.uuid4().hex[:6]}"
    batches = _batches(job, 30, 2000)
    for batch in batches:
        fleet.publish(batch)
    main = fleet.start_worker("victim")
    wait_until(lambda: _stored(job) > 0, 90, fleet.logs)
    with transaction.atomic(), connection.cursor() as cursor:
        # Hold the next batch mid-flight (parsed, nonce claimed, its insert waiting on this
        # lock), so the kill lands inside a batch, never between two.
        cursor.execute(f"LOCK TABLE {EventId._meta.db_table} IN SHARE MODE")
        wait_until(a_session_waits_on_a_lock, 60, fleet.logs)
        children = _pool_children(main.pid)
        assert children
        for child in children:  # the pool process holds the batch in flight
            os.kill(child, signal.SIGKILL)
    wait_until(lambda: _stored(job) == 30 * 2000, 180, fleet.logs)
    assert not QuarantinedEvent.objects.exists()
    assert "WorkerLostError" in (fleet.tmp_path / "victim.log").read_text()


def test_database_connections_cut_under_a_running_worker(fleet: Fleet) -> None:
    job = f"cut-{uuid.uuid4().hex[:6]}"
    batches = _batches(job, 30, 1000)
    fleet.start_worker("survivor")
    for batch in batches:
        fleet.publish(batch)
    wait_until(lambda: _stored(job) > 0, 90, fleet.logs)
    for _ in range(3):  # Postgres "restarts" under the worker: every other session dies
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        time.sleep(0.3)
    wait_until(lambda: _stored(job) == 30 * 1000, 180, fleet.logs)
    assert not QuarantinedEvent.objects.exists()
