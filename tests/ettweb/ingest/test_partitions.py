"""The events table is partitioned by event time: daily partitions made on ingest and by the
beat task, a default partition for outliers, and rows moved out of it when their day arrives."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from ettweb.ingest import partitions
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event, EventId
from ettweb.ingest.tasks import ensure_event_partitions

LineFactory = Callable[..., str]
pytestmark = pytest.mark.django_db
NOW = 1_795_000_000.0  # 2026-11-18 UTC
DAY = partitions.day_of(NOW)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    partitions.forget_known()
    yield
    partitions.forget_known()


def _rows_by_partition() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM ingest_event GROUP BY 1")
        return dict(cursor.fetchall())


def test_events_are_stored_in_their_days_partition(event_line: LineFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions.time, "time", lambda: NOW)
    lines = [event_line(kind="mark", mark="heartbeat", ts=NOW + offset)
             for offset in (0.0, 1.0, partitions.DAY_S)]
    lines.append(event_line(kind="mark", mark="heartbeat", ts=1000.0))  # 1970: an outlier
    assert ingest_lines(lines).stored == 4
    assert _rows_by_partition() == {
        partitions.partition_name(DAY): 2,
        partitions.partition_name(DAY + partitions.DAY_S): 1,
        partitions.DEFAULT_PARTITION: 1}
    assert EventId.objects.count() == Event.objects.count() == 4


def test_creating_a_day_moves_its_rows_out_of_the_default_partition(
        event_line: LineFactory) -> None:
    # Before the partition window: a day in the future past it is out of the ingestion
    # window too (now + 1 day), and would be quarantined.
    far = partitions.day_of(time.time()) - 60 * partitions.DAY_S
    ingest_lines([event_line(kind="mark", mark="heartbeat", ts=far + 5.0)])
    assert _rows_by_partition() == {partitions.DEFAULT_PARTITION: 1}
    assert partitions.ensure_days([partitions.day_of(far)], now=far) == [
        partitions.partition_name(partitions.day_of(far))]
    assert _rows_by_partition() == {partitions.partition_name(partitions.day_of(far)): 1}
    assert Event.objects.get().ts == far + 5.0


def test_beat_task_creates_partitions_ahead() -> None:
    created = ensure_event_partitions()
    assert len(created) >= 1
    ahead = partitions.ensure_ahead()  # idempotent: nothing new the second time
    assert ahead == []
    days = partitions.existing_days()
    today = partitions.day_of(time.time())
    assert {today + n * partitions.DAY_S for n in range(8)} <= days
