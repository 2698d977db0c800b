"""What keeping rollups fresh costs per ingested batch, next to a full recompute.

``measure_rollup_cost(events)`` is called by ``python -m bench.attribution`` with its seeded
fleet. It runs on a dedicated, freshly migrated database (``ett_bench`` on the embedded
Postgres, or on the server ``DATABASE_URL`` names) that is dropped at the end, so a bench
never touches real data:

1. every event except a tail is loaded with COPY (1M rows in seconds; ORM saves would take
   the whole budget), straight into the events table;
2. ``rebuild_all()`` is timed: the full recompute of every job's rollups;
3. the tail goes through the real ingest logic in ``batches`` batches of ``batch_size``
   events, and ``refresh_jobs`` is timed after each one, as the Celery task runs it.

How the tail is batched, and why: the tail is the fleet's newest events (by event time).
Batches are cut the way collectors send them: each node's collector ships its own spool, and
a node runs one job's ranks, so a batch holds the newest events of one job or a few. The
median number of jobs a batch touched is reported beside the timings.

Run alone: ``python -m bench.rollup_cost [--jobs N] [--batching node|time]`` (a smaller
fleet from bench.fleet by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

BENCH_DATABASE = "ett_bench"
Event = dict[str, Any]
_COLUMNS = ("event_id", "job", "attempt", "kind", "phase", "mark", "start", "end", "ts", "rank",
            "host", "step_start", "step_end", "step", "blocking", "attrs", "received_at")


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ettweb.settings.test")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def _admin(sql: str) -> None:
    """Run CREATE/DROP DATABASE from the configured database (outside any transaction)."""
    from django.db import connection

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(sql)


@contextmanager
def bench_database(name: str = BENCH_DATABASE) -> Iterator[None]:
    """Point Django's default connection at a new, migrated database; drop it after."""
    from django.core.management import call_command
    from django.db import connection

    original = connection.settings_dict["NAME"]
    _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(f"CREATE DATABASE {name}")
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _event_time(event: Event) -> float:
    return float(event["end"] if event["kind"] == "span" else event["ts"])


def _copy_events(events: Sequence[Event]) -> None:
    """Load events with COPY, plus their Job rows (what ingestion would have written)."""
    from django.db import connection, transaction

    from ettweb.ingest.models import Event as StoredEvent
    from ettweb.ingest.models import Job

    now = datetime.now(UTC)
    columns = ", ".join(connection.ops.quote_name(c) for c in _COLUMNS)
    with transaction.atomic():
        raw = connection.connection
        assert raw is not None
        with raw.cursor() as cursor, cursor.copy(
                f"COPY {StoredEvent._meta.db_table} ({columns}) FROM STDIN") as copy:
            for event in events:
                copy.write_row(_copy_row(event, now))
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {Job._meta.db_table} (job_id, first_seen, last_event_time, "
                "model, team, cluster) SELECT job, now(), max(coalesce(\"end\", ts)), '', '', '' "
                f"FROM {StoredEvent._meta.db_table} GROUP BY job ON CONFLICT DO NOTHING")
            cursor.execute(f"ANALYZE {StoredEvent._meta.db_table}")


def _copy_row(event: Event, now: datetime) -> tuple[Any, ...]:
    return (event["id"], event["job"], event["attempt"], event["kind"],
            event.get("phase", ""), event.get("mark", ""), event.get("start"),
            event.get("end"), event.get("ts"), event.get("rank", 0), event.get("host", ""),
            event.get("step_start"), event.get("step_end"), event.get("step"),
            event.get("blocking", True), json.dumps(event.get("attrs", {})), now)


def _tail_batches(tail: list[Event], batch_size: int, batching: str) -> list[list[Event]]:
    """Cut the newest events into batches: ``node`` the way per-node collectors ship them
    (one job's events together), ``time`` in fleet-wide time order (the worst case: one
    broker-side batch mixing every running job)."""
    if batching == "node":
        tail = sorted(tail, key=lambda e: (e["job"], _event_time(e)))
    return [tail[at:at + batch_size] for at in range(0, len(tail), batch_size)]


def measure_rollup_cost(events: list[Event], batch_size: int = 1000, batches: int = 20,
                        batching: str = "node") -> dict[str, Any]:
    """Median refresh time per ingested batch, the full recompute time, and their ratio.

    ``events`` are normalized schema-v1 dicts (as ``collector.schema.validate_event`` makes);
    ``batching`` is ``node`` (default, as collectors send) or ``time`` (see _tail_batches).
    """
    if batching not in ("node", "time"):
        raise ValueError(f"batching must be 'node' or 'time', not {batching!r}")
    _setup_django()
    from collector.schema import dump_event
    from ettweb.ingest.batches import ingest_lines
    from ettweb.rollups.rebuild import rebuild_all
    from ettweb.rollups.refresh import refresh_jobs

    ordered = sorted(events, key=_event_time)
    split = max(0, len(ordered) - batch_size * batches)
    head, tail = ordered[:split], ordered[split:]
    with bench_database():
        began = time.perf_counter()
        _copy_events(head)
        load_s = time.perf_counter() - began
        full = rebuild_all()
        refresh_s: list[float] = []
        jobs_touched: list[int] = []
        for batch in _tail_batches(tail, batch_size, batching):
            result = ingest_lines([dump_event(event) for event in batch], source="bench")
            began = time.perf_counter()
            refresh_jobs(result.jobs)
            refresh_s.append(time.perf_counter() - began)
            jobs_touched.append(len(result.jobs))
    per_batch = statistics.median(refresh_s) if refresh_s else 0.0
    return {
        "per_batch_refresh_s": per_batch,
        "full_recompute_s": full.elapsed_s,
        "ratio": per_batch / full.elapsed_s if full.elapsed_s else 0.0,
        "events": len(events),
        "jobs": full.jobs,
        "copy_load_s": load_s,
        "batches": len(refresh_s),
        "batch_size": batch_size,
        "batching": batching,
        "jobs_per_batch_median": statistics.median(jobs_touched) if jobs_touched else 0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rollup_cost",
                                     description="Rollup refresh cost per batch vs rebuild.")
    parser.add_argument("--jobs", type=int, default=200, help="jobs in the synthetic fleet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batching", choices=("node", "time"), default="node",
                        help="node: batches as per-node collectors send them (default); "
                             "time: fleet-wide time order, the worst case")
    args = parser.parse_args(argv)
    from bench.fleet import fleet_events

    events = list(fleet_events(args.seed, args.jobs))
    result = measure_rollup_cost(events, args.batch_size, args.batches, args.batching)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
