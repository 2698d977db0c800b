"""``python -m bench.ingest``: end-to-end ingestion throughput, and the naive path beside it.

1. **End to end**: events from the seeded fleet (``bench.fleet``) are written to spool files
   the way Reporters write them; a real collector agent (``python -m collector --once``,
   signed batches) publishes them to the broker and a real Celery worker (production
   settings) validates and stores them (COPY into staging, INSERT … ON CONFLICT on the event
   id). The clock runs from the agent's start until every row is committed; the time until
   every job's rollups are current again (the debounced ``ett.refresh_rollups``) is printed
   beside it.
2. **Naive**: a sample of the same kind of events saved one by one with
   ``Event.objects.create`` — what a first implementation would do — half before and half
   after the end-to-end run (its rate is bound by commit latency, which drifts).

Both run on a dedicated database (``ett_bench_ingest``; ``--database`` names another),
created, migrated and dropped here. The last line of output is one JSON object with
``events_per_s``, ``naive_events_per_s`` and ``ratio``.

``--sweep`` runs the end-to-end part with 1, 2 and 4 worker processes instead (each on a
fresh database, the spool written once): how ingestion scales with processes on this
machine, the figures the capacity plan (docs/explanation/capacity.md) is computed from.
Its last line is one JSON object with ``events_per_s`` per process count.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fleet import fleet_events
from bench.rollup_cost import _setup_django, bench_database

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "ett_bench_ingest"
EVENTS_TARGET = 40_000.0
RATIO_TARGET = 30.0
#: Worker process counts ``--sweep`` runs, in order.
SWEEP = (1, 2, 4)


def _say(text: str) -> None:
    print(f"[bench.ingest] {text}", file=sys.stderr, flush=True)


def write_spool(spool: Path, count: int, seed: int) -> int:
    """Up to ``count`` fleet events into one spool file per job, as Reporters would."""
    from collector.schema import dump_event

    spool.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    written = 0
    try:
        for event in itertools.islice(fleet_events(seed=seed, jobs=max(20, count // 700)), count):
            out = files.get(event["job"])
            if out is None:
                out = files[event["job"]] = open(  # noqa: SIM115 - closed below
                    spool / f"{event['job']}.jsonl", "w", encoding="utf-8")
            out.write(dump_event(event) + "\n")
            written += 1
    finally:
        for out in files.values():
            out.close()
    return written


def _stored() -> int:
    from ettweb.ingest.models import Event

    return Event.objects.count()


def _all_stored(expected: int) -> bool:
    """Whether ``expected`` rows are committed, without counting a growing table 20 times a second.

    Row ids are distinct and start at 1 in the fresh database, so fewer than ``expected``
    rows exist while ``max(id) < expected`` (one index probe per partition); only then is
    the exact count taken. Polling ``count(*)`` alone took Postgres CPU from the workers.
    """
    from django.db import connection

    from ettweb.ingest.models import Event

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(id) FROM {Event._meta.db_table}")
        top = cursor.fetchone()[0] or 0
    return top >= expected and _stored() >= expected


def _start_worker(env: dict[str, str], queue: str, log: Path, concurrency: int) -> Any:
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", queue,
             "-n", f"bench-{queue}@%h", "--concurrency", str(concurrency), "--loglevel", "INFO",
             "--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b" ready." not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"bench.ingest: worker did not start; see {log}")
        time.sleep(0.2)
    return worker


@dataclass(frozen=True)
class EndToEnd:
    """Seconds from the agent's start until every row is committed, and until every job's
    rollups are current again (the debounced refresh, ``ETT_ROLLUP_REFRESH_DELAY_S``)."""

    committed_s: float
    rollups_current_s: float


def _dirty_jobs() -> int:
    from ettweb.rollups.models import DirtyJob

    return DirtyJob.objects.count()


def measure_end_to_end(spool: Path, events: int, concurrency: int, work: Path) -> EndToEnd:
    """Ship ``events`` from the spool through a real agent, broker and worker; time it."""
    from django.conf import settings
    from django.db import connection

    from ettweb.ingest.credentials import new_credential
    from ettweb.settings.env import database_url

    credential = new_credential(f"bench-{uuid.uuid4().hex[:6]}")
    queue = f"ett-bench-{uuid.uuid4().hex[:8]}"
    # The worker runs with production settings (persistent connections, DEBUG off): what a
    # deployed worker runs, not the test settings' connection-per-task.
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.production",
               DJANGO_SECRET_KEY=secrets.token_urlsafe(32), DJANGO_ALLOWED_HOSTS="localhost",
               DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL),
               ETT_COLLECTOR_ID=credential.collector_id,
               ETT_COLLECTOR_SECRET=credential.secret, PYTHONUNBUFFERED="1")
    worker = _start_worker(env, queue, work / "worker.log", concurrency)
    try:
        start = time.perf_counter()
        agent = subprocess.Popen(
            [sys.executable, "-m", "collector", "--once", "--spool-dir", str(spool),
             "--queue", queue, "--state-file", str(work / "agent-state.json"),
             "--log-level", "WARNING"], cwd=ROOT, env=env)
        while not _all_stored(events):
            if agent.poll() not in (None, 0):
                raise SystemExit(f"bench.ingest: the collector agent exited {agent.returncode}")
            if time.perf_counter() - start > 900:
                raise SystemExit(f"bench.ingest: only {_stored()}/{events} rows after 900 s")
            time.sleep(0.05)
        committed = time.perf_counter() - start
        while _dirty_jobs():
            if time.perf_counter() - start > 900:
                raise SystemExit("bench.ingest: rollups not refreshed after 900 s")
            time.sleep(0.05)
        current = time.perf_counter() - start
        agent.wait(timeout=60)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    return EndToEnd(committed, current)


def measure_naive(sample: int, seed: int, tag: str) -> float:
    """Seconds to save ``sample`` events one ORM ``create`` at a time (autocommit)."""
    from ettweb.ingest.models import Event

    events = itertools.islice(fleet_events(seed=seed + 1, jobs=max(5, sample // 700)), sample)
    start = time.perf_counter()
    for event in events:
        Event.objects.create(
            event_id=f"naive-{tag}-{event['id']}", job=event["job"], attempt=event["attempt"],
            kind=event["kind"], phase=event.get("phase", ""), mark=event.get("mark", ""),
            start=event.get("start"), end=event.get("end"), ts=event.get("ts"),
            rank=event["rank"], host=event.get("host", ""), step_start=event.get("step_start"),
            step_end=event.get("step_end"), step=event.get("step"), blocking=event["blocking"],
            attrs=event["attrs"])
    return time.perf_counter() - start


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000, help="events end to end")
    parser.add_argument("--naive-sample", type=int, default=5_000,
                        help="events saved one by one for the naive figure")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="10,000 events, 500 naive")
    parser.add_argument("--sweep", action="store_true",
                        help=f"end to end only, with {', '.join(map(str, SWEEP))} worker "
                        "processes in turn")
    parser.add_argument("--database", default=DATABASE,
                        help=f"database made for the run and dropped after ({DATABASE})")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.naive_sample = 10_000, 500
    if args.events < 1 or args.naive_sample < 1:
        parser.error("--events and --naive-sample must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _setup_django()
    if args.sweep:
        print(json.dumps(sweep(args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="ett-bench-ingest-") as tmp, \
            bench_database(args.database):
        work = Path(tmp)
        _say(f"writing {args.events:,} events to spool files…")
        events = write_spool(work / "spool", args.events, args.seed)
        # The naive path is bound by commit latency, which drifts with the disk: half its
        # sample runs before the end-to-end run and half after, and the rate pools both.
        before = args.naive_sample // 2
        _say(f"saving {before:,} events one by one with the ORM…")
        naive_before_s = measure_naive(before, args.seed, "before") if before else 0.0
        _say(f"shipping {events:,} events through the collector agent and {args.concurrency} "
             "worker process(es)…")
        e2e = measure_end_to_end(work / "spool", events, args.concurrency, work)
        e2e_s = e2e.committed_s
        _say(f"saving {args.naive_sample - before:,} more events one by one with the ORM…")
        naive_after_s = measure_naive(args.naive_sample - before, args.seed, "after")
        naive_s = naive_before_s + naive_after_s

    rate, naive_rate = events / e2e_s, args.naive_sample / naive_s
    print(f"{'path':<34}{'events':>10}{'seconds':>10}{'events/s':>12}")
    print(f"{'spool → agent → broker → worker':<34}{events:>10,}{e2e_s:>10.2f}{rate:>12,.0f}")
    print(f"{'naive ORM create() per event':<34}{args.naive_sample:>10,}{naive_s:>10.2f}"
          f"{naive_rate:>12,.0f}")
    if before:
        print(f"  (naive before: {before / naive_before_s:,.0f}/s, after: "
              f"{(args.naive_sample - before) / naive_after_s:,.0f}/s)")
    print(f"ratio {rate / naive_rate:.1f}x (targets: >= {EVENTS_TARGET:,.0f} events/s, "
          f">= {RATIO_TARGET:.0f}x)")
    print(f"every job's rollups current {e2e.rollups_current_s:.2f} s after the agent started "
          f"({events / e2e.rollups_current_s:,.0f} events/s including the debounced refresh)")
    print(json.dumps({
        "events": events, "seconds": round(e2e_s, 3), "events_per_s": round(rate),
        "naive_events": args.naive_sample, "naive_events_per_s": round(naive_rate),
        "ratio": round(rate / naive_rate, 2), "worker_concurrency": args.concurrency,
        "rollups_current_s": round(e2e.rollups_current_s, 3),
        "events_target_met": rate >= EVENTS_TARGET, "ratio_target_met":
            rate / naive_rate >= RATIO_TARGET,
    }))
    return 0


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    """The end-to-end run with each of ``SWEEP`` worker process counts, one after another,
    each on a fresh database and a fresh copy of one spool (the agent retires what it
    shipped): how ingestion scales with processes here."""
    rates: dict[str, int] = {}
    current: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ett-bench-ingest-") as tmp:
        work = Path(tmp)
        _say(f"writing {args.events:,} events to spool files…")
        events = write_spool(work / "spool", args.events, args.seed)
        for processes in SWEEP:
            run = work / f"run-{processes}"
            shutil.copytree(work / "spool", run / "spool")
            with bench_database(args.database):
                _say(f"shipping {events:,} events through {processes} worker process(es)…")
                e2e = measure_end_to_end(run / "spool", events, processes, run)
            rates[str(processes)] = round(events / e2e.committed_s)
            current[str(processes)] = round(e2e.rollups_current_s, 3)
    print(f"{'worker processes':<18}{'events/s':>10}{'vs 1':>8}{'rollups current (s)':>22}")
    for count, rate in rates.items():
        print(f"{count:<18}{rate:>10,}{rate / rates['1']:>8.2f}{current[count]:>22.2f}")
    return {"events": events, "events_per_s": rates, "rollups_current_s": current,
            "scaling_vs_1": {p: round(r / rates["1"], 2) for p, r in rates.items()}}


if __name__ == "__main__":
    sys.exit(main())
