"""``waits_for_database``: a task run by a worker retries *in place* on a database
connection error, holding its message (no copy is published, so none can be lost with the
broker down or publishing blocked); a plain function call gets the error."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from django.db import OperationalError

from ettweb.platform import retry


@pytest.fixture
def waited(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    sleeps: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", sleeps.append)
    return sleeps


def _flaky(failures: int) -> tuple[Any, list[int]]:
    calls: list[int] = []

    @retry.waits_for_database
    def store(n: int) -> int:
        calls.append(n)
        if len(calls) <= failures:
            raise OperationalError("connection to server failed: server closed the connection")
        return n * 2

    return store, calls


def test_a_worker_run_waits_with_backoff_and_publishes_nothing(waited: list[float]) -> None:
    app = Celery(broker="memory://", set_as_current=False)
    app.conf.task_always_eager = False
    store, calls = _flaky(failures=6)
    task = app.task(name="t.store")(store)
    published: list[Any] = []
    task.apply_async = lambda *a, **k: published.append((a, k))  # type: ignore[method-assign]
    assert task.apply(args=(21,)).get() == 42  # a worker's execution (not called directly)
    assert calls == [21] * 7 and published == []  # in place: no retry copy was sent
    assert len(waited) == 6
    assert 0.25 <= waited[0] <= 0.5  # 0.5 s, jittered down to half
    assert 8.0 <= waited[5] <= 16.0  # 0.5 doubled five times, between half and all of it


def test_a_plain_call_gets_the_error(waited: list[float]) -> None:
    store, calls = _flaky(failures=1)
    with pytest.raises(OperationalError):
        store(1)
    assert calls == [1] and waited == []


def test_every_database_task_waits_in_place() -> None:
    """No ETT task uses Celery's autoretry any more (its copy is where batches were lost)."""
    from ettweb.celery import app

    app.loader.import_default_modules()
    ours = {name: task for name, task in app.tasks.items() if name.startswith("ett.")}
    assert {"ett.ingest_batch", "ett.collector_health", "ett.refresh_rollups"} <= set(ours)
    for name, task in ours.items():
        assert not getattr(task, "autoretry_for", ()), name
        assert getattr(task.run, "__wrapped__", None) is not None, name
