"""Two workers storing overlapping batches at once store each event once, and the counts each
reports are exact: the second waits on the first's ids, then finds them taken (real
Postgres, real threads)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from ettweb.ingest.batches import IngestResult, ingest_lines
from ettweb.ingest.models import Event, EventId
from tests.ettweb.db_sessions import start_session

LineFactory = Callable[..., str]


def _waiting_on_a_lock(timeout_s: float = 30.0) -> bool:
    """Whether another session of this database waits on a lock (the second batch)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock' "
                           "AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0]:
                return True
        time.sleep(0.05)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_batch_overlapping_an_uncommitted_one_stores_only_what_is_new(
        event_line: LineFactory) -> None:
    first = [event_line(kind="mark", mark="heartbeat", ts=float(i), id=f"e{i}")
             for i in range(6)]
    second = [*first[3:], event_line(kind="mark", mark="heartbeat", ts=9.0, id="e9")]
    holding, release = threading.Event(), threading.Event()
    results: dict[str, IngestResult] = {}
    errors: list[BaseException] = []

    def run(name: str, lines: list[str], hold: bool) -> None:
        with transaction.atomic():
            results[name] = ingest_lines(lines)
            if hold:  # the first batch keeps its ids uncommitted until released
                holding.set()
                assert release.wait(timeout=30)

    one = start_session(lambda: run("first", first, True), errors)
    assert holding.wait(timeout=30)
    two = start_session(lambda: run("second", second, False), errors)
    try:
        assert _waiting_on_a_lock()  # the second batch waits on the first's ids
    finally:
        release.set()
        one.join(timeout=30)
        two.join(timeout=30)
    assert not errors, errors
    assert results["first"] == IngestResult(stored=6, duplicates=0, rejected=0)
    assert results["second"] == IngestResult(stored=1, duplicates=3, rejected=0)
    assert sorted(Event.objects.values_list("event_id", flat=True)) == [
        "e0", "e1", "e2", "e3", "e4", "e5", "e9"]
    assert EventId.objects.count() == 7


@pytest.mark.django_db
def test_a_batch_resent_whole_is_all_duplicates(event_line: LineFactory) -> None:
    lines = [event_line(kind="mark", mark="heartbeat", ts=float(i), id=f"e{i}")
             for i in range(4)]
    assert ingest_lines(lines) == IngestResult(stored=4, duplicates=0, rejected=0)
    again = [*lines[1:], event_line(kind="mark", mark="heartbeat", ts=8.0, id="e8")]
    assert ingest_lines(again) == IngestResult(stored=1, duplicates=3, rejected=0)
    assert Event.objects.count() == 5 and EventId.objects.count() == 5
