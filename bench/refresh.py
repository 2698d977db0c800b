"""``python -m bench.refresh``: what one rollup refresh of a large, long-running job costs.

Issue 15 asks that a refresh cost what the new events cost, not what the job has lived: the
paper's largest jobs run on thousands of GPUs for weeks, every rank closing a train span a
minute. This bench measures exactly that curve, on today's refresh and on any later one:

1. **The job**: ``--ranks`` ranks (1,024) of one attempt, every rank closing a 60 s ``train``
   span with its step range and sending a heartbeat with its step half way through it
   (``--no-heartbeats``: none; each refresh then skips §3 rule 3's per-rank lookups), after
   a short init (``model_init``, ``compile``) on every rank.
   Events are built and validated with ``collector.schema`` and stored through the product's
   ingest path (``ettweb.ingest.imports.import_lines``) into a database of their own
   (``bench_refresh`` on DATABASE_URL's server, dropped at the end).
2. **Ages**: the job's history is loaded up to each age in turn (``--ages``: 1 hour, 1 day,
   3 days), refreshed once, then ``--batches`` one-minute batches (one span per rank) are
   streamed at that age, each stored and refreshed the way a worker does
   (``refresh_jobs`` on the job). Each measured refresh runs in a fresh worker process that
   reports its own wall time and peak RSS (``getrusage``), so one refresh's memory is not
   hidden by another's.
3. **Exactness**: after the last batch, the stored job rollup and day rows are compared
   with the engine run from scratch over every stored event.
4. **Storage**: the bytes the job's events (partitions and indexes), their dedup ids and
   its chunks take, per event and per chunk: what the capacity plan in
   docs/explanation/capacity.md scales.

The last line is one JSON object: per age the events stored, each batch's refresh time
and the worker's peak RSS, the ratios of the oldest age to the youngest, the exactness
check, and the issue's targets (refresh at the oldest age within 1.5x of the youngest and
at most 1 s; peak RSS within 1.5x from the second age to the oldest) with ``meets_target``.
``--quick`` is a small job for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

from bench.rollup_cost import _setup_django, bench_database

DATABASE: Final = "bench_refresh"
JOB: Final = "bench-refresh-job"
SLICE_S: Final = 60.0
STEPS_PER_SLICE: Final = 100
#: 2026-03-01T00:00:00Z: the job starts at a round UTC midnight.
START: Final = 1772323200.0
INIT: Final = (("model_init", 120.0), ("compile", 180.0))
TARGET_RATIO: Final = 1.5
TARGET_REFRESH_S: Final = 1.0
TARGET_RSS_RATIO: Final = 1.5
AGES_S: Final = {"1h": 3600.0, "1d": 86400.0, "3d": 3 * 86400.0}


def _say(text: str) -> None:
    print(f"[bench.refresh] {text}", file=sys.stderr, flush=True)


# =========================================================================== the job

def _first_train_at() -> float:
    return START + sum(seconds for _, seconds in INIT)


def job_lines(ranks: int, start: float, end: float, heartbeats: bool = True) -> Iterator[str]:
    """Every event of the job whose time falls in [start, end): its attempt_start and init
    at the very start, then one train span per rank per minute, each with a heartbeat
    carrying the step half way through it (``heartbeats``; sent with its slice) (ids stable,
    so a reload of the same range stores nothing new)."""
    from collector.schema import dump_event, validate_event

    def event(**raw: Any) -> str:
        return dump_event(validate_event({"v": 1, "job": JOB, "attempt": 0, **raw}))

    if start <= START < end:
        yield event(id="start", kind="mark", mark="attempt_start", ts=START, rank=0,
                    attrs={"gpus": ranks, "model": "dlrm-bench", "team": "bench",
                           "cluster": "bench"})
        t = START
        for phase, seconds in INIT:
            for rank in range(ranks):
                yield event(id=f"{phase}-{rank}", kind="span", phase=phase, start=t,
                            end=t + seconds, rank=rank)
            t += seconds
    first = _first_train_at()
    index = max(0, math.ceil((start - first) / SLICE_S))
    while first + index * SLICE_S < end:
        t = first + index * SLICE_S
        if t >= start:
            step = index * STEPS_PER_SLICE
            for rank in range(ranks):
                yield event(id=f"train-{index}-{rank}", kind="span", phase="train", start=t,
                            end=t + SLICE_S, rank=rank, step_start=step,
                            step_end=step + STEPS_PER_SLICE)
                if heartbeats:  # mid-slice, with the step (ETT_SPEC §3 rule 3's evidence)
                    yield event(id=f"beat-{index}-{rank}", kind="mark", mark="heartbeat",
                                ts=t + SLICE_S / 2, rank=rank, step=step + STEPS_PER_SLICE // 2)
        index += 1


def _store(lines: Iterator[str]) -> int:
    from ettweb.ingest.imports import import_lines

    return import_lines(lines, source="bench.refresh").stored


# =========================================================================== one refresh

def refresh_once(database: str) -> dict[str, float]:
    """In this (fresh) process: refresh the job once; its wall time and peak RSS."""
    _setup_django()
    from django.db import connection

    from ettweb.rollups.models import JobRollup
    from ettweb.rollups.refresh import refresh_jobs

    connection.settings_dict["NAME"] = database
    began = time.perf_counter()
    stats = refresh_jobs([JOB])
    elapsed = time.perf_counter() - began
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"refresh_s": elapsed, "peak_rss_mb": peak_kb / 1024.0, "events_read": stats.events,
            "events": JobRollup.objects.get(job=JOB).events}


def _refresh_in_worker(database: str) -> dict[str, float]:
    """One refresh in a new worker process (its own memory, as a Celery worker's)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.refresh", "--refresh-once", "--database", database],
        check=True, capture_output=True, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# =========================================================================== the run

def measure_age(name: str, age_s: float, loaded_to: float, ranks: int, batches: int,
                database: str, heartbeats: bool = True) -> tuple[dict[str, Any], float]:
    """Load the job up to ``batches`` minutes before ``age_s``, refresh, then stream and
    refresh the ``batches`` minutes that end at the age.

    The batches land in the last minutes of a chunk (ages are whole chunks), when the chunk
    they recompute holds the most events: the costliest batches of the chunk, not the
    cheapest."""
    until = START + age_s - batches * SLICE_S
    began = time.perf_counter()
    stored = _store(job_lines(ranks, loaded_to, until, heartbeats))
    _say(f"{name}: history to {age_s / 3600:g} h stored ({stored:,} new events, "
         f"{time.perf_counter() - began:.0f} s)")
    settle = _refresh_in_worker(database)
    runs = []
    for batch in range(batches):
        start = until + batch * SLICE_S
        _store(job_lines(ranks, start, start + SLICE_S, heartbeats))
        runs.append(_refresh_in_worker(database))
        _say(f"{name}: batch {batch + 1}: refresh {runs[-1]['refresh_s']:.2f} s, "
             f"{int(runs[-1]['events_read']):,} of the job's {int(runs[-1]['events']):,} "
             f"events read, peak RSS {runs[-1]['peak_rss_mb']:.0f} MB")
    times = [r["refresh_s"] for r in runs]
    return ({"age": name, "age_s": age_s, "events": int(runs[-1]["events"]),
             "events_read": [int(r["events_read"]) for r in runs],
             "settle_refresh_s": round(settle["refresh_s"], 3),
             "settle_peak_rss_mb": round(settle["peak_rss_mb"], 1),
             "batch_refresh_s": [round(t, 3) for t in times],
             "median_refresh_s": round(statistics.median(times), 3),
             "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1)},
            START + age_s)


def exactness() -> dict[str, Any]:
    """The stored rollups against the engine from scratch over every stored event."""
    from ettweb.attribution.chunk_sums import day_values
    from ettweb.attribution.engine import attribute_job
    from ettweb.rollups.models import DailyCategoryRollup, JobRollup
    from ettweb.rollups.refresh import load_events

    expected = attribute_job(load_events([JOB])[JOB])
    row = JobRollup.objects.get(job=JOB)
    stored = {(day, category): gpu_s for day, category, gpu_s in DailyCategoryRollup.objects
              .filter(job__job=JOB).values_list("day", "category", "gpu_seconds")}
    wanted = {key: gpu_s for key, (_, gpu_s) in day_values(expected).items()}
    checks = {
        "wall_gpu_s": math.isclose(row.wall_gpu_s, expected.wall_gpu_s, rel_tol=1e-9),
        "productive_gpu_s": math.isclose(row.productive_gpu_s, expected.productive_gpu_s,
                                         rel_tol=1e-9),
        "lost_gpu_s": set(row.lost_gpu_s) == set(expected.lost_gpu_s) and all(
            math.isclose(row.lost_gpu_s[k], v, rel_tol=1e-9)
            for k, v in expected.lost_gpu_s.items()),
        "day_rows": set(stored) == set(wanted) and all(
            math.isclose(stored[k], v, rel_tol=1e-9) for k, v in wanted.items()),
        "repeated_steps": row.repeated_steps == expected.repeated_steps,
        "time_to_start_s": row.time_to_start_s == expected.time_to_start_s}
    return {"exact": all(checks.values()), "checks": checks,
            "ett_pct": row.ett_pct, "expected_ett_pct": expected.ett_pct}


def storage() -> dict[str, Any]:
    """What the job takes in Postgres: the events (every partition, indexes included), the
    dedup ids and the chunks, in bytes and per event / per chunk (the capacity plan's)."""
    from django.db import connection

    from ettweb.rollups.models import AttributionChunk

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'ingest_event'")
        (events_bytes,) = cursor.fetchone() or (0,)
        cursor.execute("SELECT pg_total_relation_size('ingest_eventid'), "
                       "pg_total_relation_size('rollups_attributionchunk'), "
                       "(SELECT count(*) FROM ingest_event)")
        ids_bytes, chunk_bytes, events = cursor.fetchone() or (0, 0, 0)
    chunks = AttributionChunk.objects.count()
    return {"events": int(events), "event_bytes": int(events_bytes),
            "event_id_bytes": int(ids_bytes), "chunk_bytes": int(chunk_bytes),
            "chunks": chunks,
            "bytes_per_event": round((int(events_bytes) + int(ids_bytes)) / max(1, events), 1),
            "bytes_per_chunk": round(int(chunk_bytes) / max(1, chunks))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    _setup_django()
    began = time.perf_counter()
    ages = [(name, AGES_S[name]) for name in args.ages]
    rows: list[dict[str, Any]] = []
    with bench_database(args.database):
        loaded_to = START
        for name, age_s in ages:
            row, loaded_to = measure_age(name, age_s, loaded_to, args.ranks, args.batches,
                                         args.database, not args.no_heartbeats)
            rows.append(row)
        exact = exactness()
        stored = storage()
    first, last = rows[0], rows[-1]
    ratio = last["median_refresh_s"] / first["median_refresh_s"]
    rss_base = rows[1] if len(rows) > 2 else first
    rss_ratio = last["peak_rss_mb"] / rss_base["peak_rss_mb"]
    return {
        "benchmark": "refresh", "ranks": args.ranks, "slice_s": SLICE_S,
        "heartbeats": not args.no_heartbeats,
        "batches_per_age": args.batches, "ages": rows,
        "refresh_ratio": round(ratio, 2), "refresh_ratio_of": [last["age"], first["age"]],
        "rss_ratio": round(rss_ratio, 2), "rss_ratio_of": [last["age"], rss_base["age"]],
        **exact, "storage": stored, "seconds": round(time.perf_counter() - began, 1),
        "targets": {"refresh_ratio": TARGET_RATIO, "refresh_s": TARGET_REFRESH_S,
                    "rss_ratio": TARGET_RSS_RATIO},
        "meets_target": bool(exact["exact"] and ratio <= TARGET_RATIO
                             and last["median_refresh_s"] <= TARGET_REFRESH_S
                             and rss_ratio <= TARGET_RSS_RATIO),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.refresh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, help="ranks of the job (1,024; --quick 16)")
    parser.add_argument("--ages", nargs="+", choices=sorted(AGES_S),
                        help="ages to measure at, youngest first (1h 1d 3d; --quick 1h 1d)")
    parser.add_argument("--batches", type=int,
                        help="one-minute batches streamed at each age (3; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="a small job: a smoke run")
    parser.add_argument("--no-heartbeats", action="store_true",
                        help="no stepped heartbeat per slice (as before issue 41)")
    parser.add_argument("--database", default=DATABASE,
                        help=f"database made for the run and dropped after ({DATABASE})")
    parser.add_argument("--refresh-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = ({"ranks": 16, "ages": ["1h", "1d"], "batches": 2} if args.quick
                else {"ranks": 1024, "ages": ["1h", "1d", "3d"], "batches": 3})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.ranks < 1 or args.batches < 1:
        parser.error("--ranks and --batches must be at least 1")
    if sorted(args.ages, key=AGES_S.__getitem__) != args.ages or len(set(args.ages)) != len(
            args.ages):
        parser.error("--ages must be distinct and youngest first, e.g. 1h 1d 3d")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.refresh_once:
        print(json.dumps(refresh_once(args.database)))
        return 0
    result = run(args)
    for row in result["ages"]:
        print(f"{row['age']:>4}: {row['events']:>10,} events  refresh median "
              f"{row['median_refresh_s']:.3f} s  peak RSS {row['peak_rss_mb']:.0f} MB")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
