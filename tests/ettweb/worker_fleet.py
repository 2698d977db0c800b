"""A private Redis and Celery workers on it, for the tests that kill, stop and restart them.

Shared by ``test_broker_faults.py`` and ``ingest/test_fuzz_worker.py``; imported by its
package path (``tests.ettweb.worker_fleet``) so it works whatever directory pytest put on
``sys.path`` first.
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
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from django.db import connection

from collector.auth import sign_batch
from ettweb.ingest.credentials import new_credential
from ettweb.platform.embedded import _redis_executable
from ettweb.settings.env import database_url

ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_S = 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """redis-server on a port and directory of its own; stop() and start() at will. With a
    ``password``, every client must give it (``url`` stays without it)."""

    def __init__(self, root: Path, password: str | None = None) -> None:
        self.port, self.dir, self.password = _free_port(), root / "redis", password
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(_redis_executable()), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"-NOAUTH" if self.password else b"+PONG"):
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
        #: Run in each worker before it starts (a memory cap: pool children inherit it).
        self.preexec: Callable[[], None] | None = None
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
             "-n", f"{name}-{self.queue}@%h", "--concurrency", "1", "--pool", "prefork",
             "--loglevel", "INFO",
             "--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killpg reaches pool children
            preexec_fn=self.preexec)
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


def heartbeat_lines(job: str, count: int) -> list[str]:
    """``count`` valid heartbeat marks of ``job`` an hour old, as raw JSONL lines."""
    t0 = time.time() - 3600
    return [json.dumps({"v": 1, "id": f"{job}-{i}", "job": job, "attempt": 0, "kind": "mark",
                        "mark": "heartbeat", "ts": t0 + i}) for i in range(count)]
