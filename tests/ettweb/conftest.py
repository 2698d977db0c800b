"""Fixtures of the tests that run real Celery workers against a Redis of their own
(``worker_fleet``): the broker-fault tests and the visibility heartbeat's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ettweb.worker_fleet import PrivateRedis, Workers


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis server of the test's own, stopped after it."""
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workers(tmp_path: Path, redis: PrivateRedis) -> Iterator[Workers]:
    """Real workers on that Redis; every one still running is stopped after the test."""
    running = Workers(tmp_path, redis)
    try:
        yield running
    finally:
        running.stop()
