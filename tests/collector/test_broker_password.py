"""The agent against a Redis that requires a password (``--requirepass``), the password given
as a file (``CELERY_BROKER_PASSWORD_FILE``), as the compose stack gives it: batches arrive
with it, and without it (or with a wrong one) the agent says what the broker answered and
ships nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from collector_brokers import BrokerQueue, PrivateRedis, free_port

from collector.config import STATE_FILE_NAME

LineFactory = Callable[..., str]
REPO = Path(__file__).resolve().parents[2]
PASSWORD = "c0ffee" * 5

pytestmark = pytest.mark.integration


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(free_port(), tmp_path, password=PASSWORD)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def spool(tmp_path: Path, event_line: LineFactory) -> tuple[Path, list[str]]:
    path = tmp_path / "spool"
    path.mkdir()
    lines = [event_line(kind="mark", mark="heartbeat", ts=i) for i in range(4)]
    (path / "j1.a0.r0.1.x.jsonl").write_text("".join(line + "\n" for line in lines))
    return path, lines


def _agent(spool: Path, server: PrivateRedis, queue: str,
           *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CELERY_BROKER_", "ETT_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "collector", "--broker", server.url, "--spool-dir", str(spool),
         "--queue", queue, "--source", "node-p", "--unsigned", "--retry-initial", "0.2",
         "--retry-max", "0.5", "--publish-timeout", "3", *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_agent_ships_with_the_password_from_its_file(
        tmp_path: Path, locked_redis: PrivateRedis, spool: tuple[Path, list[str]]) -> None:
    directory, lines = spool
    password_file = tmp_path / "broker.password"
    password_file.write_text(PASSWORD + "\n")
    queue = BrokerQueue(locked_redis.url_with_password, f"ett-pw-{uuid.uuid4().hex[:8]}")
    queue.declare()
    agent = _agent(directory, locked_redis, queue.name, "--once",
                   "--broker-password-file", str(password_file))
    output, _ = agent.communicate(timeout=60)
    assert agent.returncode == 0, output
    assert PASSWORD not in output  # nor in its log lines
    assert sorted(line for got in queue.receive(lines=4) for line in got.lines) == sorted(lines)


@pytest.mark.parametrize(("password", "answer"), [
    (None, "broker error (OperationalError: Authentication required.)"),
    ("wrong", "broker error (OperationalError: invalid username-password pair"),
])
def test_without_the_right_password_the_agent_names_the_refusal_and_ships_nothing(
        tmp_path: Path, locked_redis: PrivateRedis, spool: tuple[Path, list[str]],
        password: str | None, answer: str) -> None:
    directory, _ = spool
    extra: list[str] = []
    if password is not None:
        (tmp_path / "broker.password").write_text(password + "\n")
        extra = ["--broker-password-file", str(tmp_path / "broker.password")]
    queue = BrokerQueue(locked_redis.url_with_password, f"ett-pw-{uuid.uuid4().hex[:8]}")
    queue.declare()
    agent = _agent(directory, locked_redis, queue.name, *extra)
    assert agent.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while not any(answer in line for line in seen):  # it keeps retrying, saying why
        assert time.monotonic() < deadline and agent.poll() is None, "".join(seen)
        seen.append(agent.stdout.readline())
    agent.send_signal(signal.SIGTERM)
    output, _ = agent.communicate(timeout=30)
    assert agent.returncode == 0, output  # a follow run stopped by SIGTERM
    assert queue.receive(lines=1, timeout=1.0) == []
    state = json.loads((directory / STATE_FILE_NAME).read_text())
    assert state["totals"]["lines"] == 0  # nothing counted shipped
