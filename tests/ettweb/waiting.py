"""Polling helpers for the tests that run real workers: wait for a condition with a deadline
(failing with the workers' logs), and tell when a worker's query is blocked on a lock."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.db import connection


def wait_until(predicate: Callable[[], bool], timeout: float, logs: Callable[[], str]) -> None:
    """Poll ``predicate`` every 0.2 s; past ``timeout`` fail with ``logs()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out; worker logs:\n{logs()}")


def a_session_waits_on_a_lock() -> bool:
    """Whether another session of this database waits on a lock (a batch held mid-insert)."""
    with connection.cursor() as cursor:
        # Inside a transaction pg_stat_activity is a snapshot taken at first use: drop it.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'")
        return bool(cursor.fetchone()[0])
