"""Retention: raw events older than the window are dropped, their numbers are kept final,
an event that old is refused (counted by day, never quarantined: re-importing the retained
raw files of a dropped day says so in one line), and later events still refresh exactly."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from ettweb.attribution.chunk_sums import day_values
from ettweb.attribution.engine import attribute_job
from ettweb.ingest import partitions
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import Event, EventHorizon, EventId, QuarantinedEvent
from ettweb.ingest.retention import drop_expired
from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.rollups.models import AttributionChunk, DailyCategoryRollup, JobRollup
from ettweb.rollups.rebuild import rebuild_all
from ettweb.rollups.refresh import refresh_jobs
from tests.ettweb.rollups.rollup_fleet import EPOCH, FleetBuilder

pytestmark = pytest.mark.django_db
DAY = 86400.0
HOUR = 3600.0


def _job(b: FleetBuilder, job: str, start: float, hours: int, step: int = 0) -> None:
    """One attempt training an hour at a time (a span per rank every 10 minutes)."""
    b.mark(job, 0, "attempt_start", start, attrs={"gpus": 8})
    b.span(job, 0, "compile", start, start + 300.0)
    t = start + 300.0
    for _ in range(hours * 6):
        for rank in (0, 1):
            b.span(job, 0, "train", t, t + 600.0, rank=rank, step_start=step,
                   step_end=step + 50)
        t, step = t + 600.0, step + 50


def _numbers(job: str) -> dict[str, Any]:
    row = JobRollup.objects.get(job=job)
    days = {(d, c): g for d, c, g in DailyCategoryRollup.objects.filter(job_id=job)
            .values_list("day", "category", "gpu_seconds")}
    return {"wall": row.wall_gpu_s, "productive": row.productive_gpu_s,
            "lost": row.lost_gpu_s, "steps": row.repeated_steps, "days": days,
            "start": row.time_to_start_s}


def _engine(events: list[dict[str, Any]]) -> dict[str, Any]:
    whole = attribute_job(events)
    return {"wall": whole.wall_gpu_s, "productive": whole.productive_gpu_s,
            "lost": whole.lost_gpu_s, "steps": whole.repeated_steps,
            "days": {k: g for k, (_, g) in day_values(whole).items()},
            "start": whole.time_to_start_s}


def _approx(numbers: dict[str, Any]) -> dict[str, Any]:
    return {k: (pytest.approx(v, rel=1e-9) if isinstance(v, float | dict) and v else v)
            for k, v in numbers.items()}


def test_old_events_are_dropped_and_their_numbers_stay() -> None:
    b = FleetBuilder()
    _job(b, "long", EPOCH, hours=60)  # 2026-03-01 00:00 to 03-03 12:05
    ingest_lines(b.lines(), any_age_partitions=True)  # dated partitions, as ett_import
    refresh_jobs(["long"])
    before = _numbers("long")
    assert before == _approx(_engine(b.events))
    day_one = AttributionChunk.objects.filter(job="long", chunk__lt=(EPOCH + DAY) // 900)
    assert day_one.count() == 1  # a small job: one chunk a day
    now = EPOCH + 2 * DAY + 13 * HOUR  # 03-03 13:00; keep 1 day: 03-01 goes
    dropped = drop_expired(now=now, days=1)
    assert dropped.partitions == (partitions.partition_name(int(EPOCH)),)
    assert dropped.events == sum(1 for e in b.events if e.get("start", e.get("ts")) < EPOCH + DAY)
    assert dropped.before == EPOCH + DAY and dropped.chunks_finalized == 1
    assert EventHorizon.objects.get().before == EPOCH + DAY
    assert not Event.objects.filter(start__lt=EPOCH + DAY).exists()
    assert EventId.objects.count() == Event.objects.count()
    # The numbers are the same, however the job is refreshed: final chunks are kept.
    refresh_jobs(["long"], whole=True)
    assert _numbers("long") == _approx(before)
    rebuild_all()
    assert _numbers("long") == _approx(before)
    assert list(AttributionChunk.objects.filter(job="long", final=True)
                .values_list("chunk", flat=True)) == [EPOCH // 900]


def test_an_event_older_than_the_horizon_is_refused_and_newer_ones_still_count() -> None:
    b = FleetBuilder()
    _job(b, "long", EPOCH, hours=36)
    ingest_lines(b.lines(), any_age_partitions=True)
    refresh_jobs(["long"])
    drop_expired(now=EPOCH + 2 * DAY, days=1)
    late = FleetBuilder()
    late._ids = iter(range(10_000, 20_000))  # ids the first builder never used
    late.mark("long", 0, "heartbeat", EPOCH + 3600.0)  # a day and more old: refused
    late.span("long", 0, "eval", EPOCH + 36 * HOUR + 400.0, EPOCH + 36 * HOUR + 700.0)
    late.mark("long", 0, "attempt_end", EPOCH + 36 * HOUR + 700.0, attrs={"status": "completed"})
    result = ingest_lines(late.lines())
    assert (result.stored, result.rejected, result.expired) == (2, 0, 1)
    assert result.expired_days == ("2026-03-01",)
    assert not QuarantinedEvent.objects.exists()  # policy, not bad data
    refresh_jobs(result.jobs)
    # Exactly what the engine says of every event that was ever accepted.
    assert _numbers("long") == _approx(_engine([*b.events, *late.events[1:]]))


def test_a_drop_waits_for_marked_chunks_to_be_refreshed() -> None:
    b = FleetBuilder()
    _job(b, "long", EPOCH, hours=30)
    ingest_lines(b.lines(), any_age_partitions=True)  # marked, never refreshed
    assert not JobRollup.objects.exists()
    drop_expired(now=EPOCH + 2 * DAY, days=1)
    assert _numbers("long") == _approx(_engine(b.events))


@pytest.mark.slow
def test_a_carry_no_recompute_can_read_is_let_go() -> None:
    """Spans open across chunk boundaries (one per rank) are kept with each chunk for the
    next one's recompute; once both sides are final, nothing reads them."""
    b = FleetBuilder()
    b.mark("wide", 0, "attempt_start", EPOCH, attrs={"gpus": 64})
    t = EPOCH + 7.0  # slices that never line up with a chunk's edge
    for minute in range(36 * 60):
        for rank in range(64):
            b.span("wide", 0, "train", t, t + 60.0, rank=rank, step_start=10 * minute,
                   step_end=10 * minute + 10)
        t += 60.0
    ingest_lines(b.lines(), any_age_partitions=True)
    refresh_jobs(["wide"])
    before = _numbers("wide")
    carried = AttributionChunk.objects.filter(job="wide").exclude(carry=[]).count()
    assert carried == AttributionChunk.objects.filter(job="wide").count() - 1  # all but last
    day_one = AttributionChunk.objects.filter(job="wide", chunk__lt=(EPOCH + DAY) // 900)
    assert day_one.count() == 48  # 960 events a quarter hour: two a chunk
    drop_expired(now=EPOCH + 2 * DAY, days=1)
    final = list(AttributionChunk.objects.filter(job="wide", final=True).order_by("chunk"))
    assert len(final) == 48 and all(c.carry == [] for c in final[:-1])
    assert final[-1].carry  # the chunk after it is not final: it may still read it
    refresh_jobs(["wide"], whole=True)
    assert _numbers("wide") == _approx(before)


def test_the_default_partition_is_dropped_too() -> None:
    b = FleetBuilder()
    _job(b, "toy", 1000.0, hours=2)  # 1970: the default partition's
    ingest_lines(b.lines())
    refresh_jobs(["toy"])
    before = _numbers("toy")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partitions.DEFAULT_PARTITION}")
        assert cursor.fetchone()[0] == len(b.events)
    assert drop_expired(now=EPOCH, days=35).events == len(b.events)
    assert not Event.objects.exists() and not EventId.objects.exists()
    refresh_jobs(["toy"], whole=True)
    assert _numbers("toy") == _approx(before)


def test_beat_drops_expired_events_hourly() -> None:
    entry = BEAT_SCHEDULE["drop-expired-events"]
    assert entry["task"] == "ett.drop_expired_events" and entry["schedule"] == 3600.0


def test_reimporting_dropped_days_is_refused_in_one_line_with_no_quarantine(
        tmp_path: Path) -> None:
    """The retained raw files of days retention dropped, imported again: nothing is stored,
    nothing quarantined, and the summary says how many events, which days and why."""
    b = FleetBuilder()
    _job(b, "old", EPOCH, hours=30)
    archive = tmp_path / "old.jsonl"
    archive.write_text("\n".join(b.lines()) + "\n")
    call_command("ett_import", str(archive), "--no-progress", stdout=io.StringIO())
    drop_expired(now=EPOCH + 3 * DAY, days=1)
    before = _numbers("old")
    out = io.StringIO()
    call_command("ett_import", str(archive), "--no-progress", stdout=out)
    summary = out.getvalue()
    assert (f"0 stored, 0 duplicates, 0 rejected; {len(b.lines()):,} events of 2026-03-01 to "
            "2026-03-02 (2 days) refused: raw events of those days were dropped after "
            "ETT_EVENT_RETENTION_DAYS and their numbers are final") in summary, summary
    assert not QuarantinedEvent.objects.exists()
    assert _numbers("old") == before
