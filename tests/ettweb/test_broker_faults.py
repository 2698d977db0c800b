"""Broker faults with real processes on a Redis of the test's own (issue 13, defects 1 and 3).

1. A worker whose whole process group is killed (``kill -9``: main process and pool together,
   so nobody puts its message back) while it holds an ingest batch: the batch must be stored
   by another worker within the visibility timeout (10 s here, via
   ``ETT_BROKER_VISIBILITY_TIMEOUT_S``), not an hour later.
2. Redis stops and comes back while a worker holds a message (a countdown task, as every
   ingested batch schedules): the worker must survive and go on consuming.

The Redis is private (its own port and data directory, AOF on as in production), so stopping
it touches no other test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from django.db import connection, transaction
from waiting import a_session_waits_on_a_lock, wait_until

from collector.auth import sign_batch
from ettweb.embedded import _redis_executable
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import Event, EventId, QuarantinedEvent
from ettweb.settings.env import database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_S = 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """redis-server on a port and directory of its own; stop() and start() at will."""

    def __init__(self, root: Path) -> None:
        self.port, self.dir = _free_port(), root / "redis"
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(_redis_executable()), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
             "--save", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.1)
        pytest.fail("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


class Workers:
    """Celery workers on a private queue of the private Redis, each in its own session."""

    def __init__(self, tmp_path: Path, redis: PrivateRedis) -> None:
        self.tmp_path, self.queue = tmp_path, f"ett-broker-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.credential = new_credential(f"broker-{self.queue}")
        self.app = Celery(broker=redis.url)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        self.broker_url = redis.url  # Celery prefers $CELERY_BROKER_URL to broker=: say it
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test",
                        DATABASE_URL=database_url(connection.settings_dict),
                        CELERY_BROKER_URL=redis.url, PYTHONUNBUFFERED="1",
                        ETT_BROKER_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S),
                        ETT_ROLLUP_REFRESH_DELAY_S="30")

    def start(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", self.queue,
             "-n", f"{name}@%h", "--concurrency", "1", "--pool", "prefork", "--loglevel", "INFO",
             "--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: killpg reaches pool children
        self.procs.append(proc)
        return proc

    def publish(self, lines: list[str]) -> None:
        auth = sign_batch(self.credential.collector_id, self.credential.secret, lines)
        self.send(lines, "broker-test", auth)

    def send(self, lines: list[str], source: str, auth: object) -> None:
        """Publish to the private Redis, whatever $CELERY_BROKER_URL says (CI sets it)."""
        with self.app.connection_for_write(self.broker_url) as connection:
            self.app.send_task("ett.ingest_batch", args=(lines, source, auth),
                               queue=self.queue, connection=connection)

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in self.tmp_path.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workers(tmp_path: Path, redis: PrivateRedis) -> Iterator[Workers]:
    running = Workers(tmp_path, redis)
    try:
        yield running
    finally:
        running.stop()


def _lines(job: str, count: int) -> list[str]:
    t0 = time.time() - 3600
    return [json.dumps({"v": 1, "id": f"{job}-{i}", "job": job, "attempt": 0, "kind": "mark",
                        "mark": "heartbeat", "ts": t0 + i}) for i in range(count)]


def _stored(job: str) -> int:
    return Event.objects.filter(job=job).count()


def test_a_batch_held_by_a_killed_worker_is_stored_by_another(workers: Workers) -> None:
    """kill -9 of the whole process group mid-batch: nobody restores the message, so only
    the visibility timeout can; with ours (10 s here) worker B stores the batch in well under
    a minute — with kombu's default it would sit in ``unacked`` for an hour."""
    job = f"held-{uuid.uuid4().hex[:6]}"
    victim = workers.start("victim")
    with transaction.atomic(), connection.cursor() as cursor:
        # The batch's insert waits on this lock, so the kill lands inside it.
        cursor.execute(f"LOCK TABLE {EventId._meta.db_table} IN SHARE MODE")
        workers.publish(_lines(job, 500))
        wait_until(a_session_waits_on_a_lock, 90, workers.logs)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
    assert _stored(job) == 0
    workers.start("rescuer")  # within the visibility timeout, not kombu's hour
    wait_until(lambda: _stored(job) == 500, 6 * VISIBILITY_S + 30, workers.logs)
    assert "ett.ingest_batch" in workers.log("rescuer")
    assert Event.objects.filter(job=job).values("event_id").distinct().count() == 500
    assert not QuarantinedEvent.objects.exists()


def test_a_worker_survives_a_redis_restart_while_holding_a_message(
        workers: Workers, redis: PrivateRedis) -> None:
    """A countdown task held (unacked) when Redis goes away: the worker must reconnect and
    go on consuming instead of exiting with "Unrecoverable error"."""
    first, second = f"before-{uuid.uuid4().hex[:6]}", f"after-{uuid.uuid4().hex[:6]}"
    worker = workers.start("survivor")
    workers.publish(_lines(first, 50))  # stored; schedules a refresh 30 s out: held unacked
    wait_until(lambda: _stored(first) == 50, 90, workers.logs)
    time.sleep(1.0)
    redis.stop()
    time.sleep(3.0)
    redis.start()
    workers.publish(_lines(second, 50))
    wait_until(lambda: _stored(second) == 50, 90, workers.logs)
    assert worker.poll() is None, workers.log("survivor")[-3000:]
    assert "Unrecoverable error" not in workers.log("survivor")
