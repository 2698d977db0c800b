"""The dashboard bench's fleet: the simulator's jobs with every rank's events, loaded the way
production loads events.

Why ranks are added: ``ettweb.simulate`` emits rank 0 only, and a fleet of the size infra
owners live in needs every rank of a job emitting its phases. Ranks 1..R-1 repeat rank 0's
blocking spans with boundaries a little inside rank 0's, as real ranks do, so the numbers
barely move and the event count reaches ``--events``: R = min(GPUs, a cap chosen by a
counting pass).

Why through the ingest path: the pages must be timed on the tables production writes. The
events go through ``ettweb.ingest.imports.import_lines`` (the worker's own validation, id
dedup, one partition per day, COPY into staging then INSERT, never ORM saves) and the rollups
through the product's own ``refresh_imported``. Collectors report health (some silent, some
with backlog, drops and corrupted records) and ingestion quarantines some bad lines per
collector, so every page has data.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from bench.dashboard_stages import say

Event = dict[str, Any]
#: Bumped when the way the fleet is drawn changes, so an old database is not reused.
FLEET_VERSION: Final = 1
SOURCE: Final = "bench.dashboard"
#: Phases every rank of a job runs (the rest are the supervisor's: scheduling, container
#: start, publishing, background uploads).
RANK_PHASES: Final = frozenset({
    "rendezvous", "process_group_init", "model_init", "sharding_plan", "data_init", "compile",
    "train", "checkpoint_save", "checkpoint_load", "eval", "shutdown"})
MAX_RANKS: Final = 64


@dataclass(frozen=True)
class FleetSize:
    """What to load: ``jobs`` over ``days`` days, with at least ``events`` events."""

    seed: int
    jobs: int
    days: int
    events: int

    def marker(self) -> dict[str, int]:
        return {**asdict(self), "version": FLEET_VERSION}


def _fans_out(event: Event) -> bool:
    return (event["kind"] == "span" and event.get("blocking", True)
            and event["phase"] in RANK_PHASES)


def with_ranks(events: Sequence[Event], ranks: int, rng: random.Random) -> list[Event]:
    """The job's events with ranks 1..``ranks``-1 added beside rank 0's blocking phases.

    A rank's span starts a little after rank 0's and ends a little before (at most 0.5 s or
    1% of the span each side), so rank 0 still spans the piece and the job's numbers stay
    what the simulator meant; train spans keep rank 0's steps.
    """
    out: list[Event] = []
    for event in events:
        host = f"{event['job']}-node0"
        out.append({**event, "rank": 0, "host": host})
        if ranks > 1 and _fans_out(event):
            out.extend(_rank_copy(event, rank, rng) for rank in range(1, ranks))
    return out


def _rank_copy(event: Event, rank: int, rng: random.Random) -> Event:
    start, end = float(event["start"]), float(event["end"])
    slack = min(0.5, 0.01 * (end - start))
    lo = round(start + rng.uniform(0.0, slack), 3)
    hi = round(end - rng.uniform(0.0, slack), 3)
    if hi <= lo:
        lo, hi = start, end
    return {**event, "id": f"{event['id']}-r{rank}", "rank": rank,
            "host": f"{event['job']}-node{rank // 8}", "start": lo, "end": hi}


def _plan(size: FleetSize) -> tuple[Any, Any]:
    from ettweb.simulate.fleet import FleetPlan
    from ettweb.simulate.rollout_plan import rollout_schedule
    from ettweb.simulate.store import today_utc

    # The fleet's last day is yesterday: a fleet ending today holds only what happened by
    # now, and the jobs drawn to start later today would have no events at all, leaving the
    # database short of the jobs asked for.
    plan = FleetPlan(seed=size.seed, days=size.days, jobs=size.jobs,
                     end=today_utc() - timedelta(days=1), until=time.time())
    return plan, rollout_schedule(plan)


def _job_counts(plan: Any, schedule: Any) -> list[tuple[int, int, int]]:
    """(rank-0 events, events every rank repeats, GPUs) per job: the counting pass."""
    from ettweb.simulate.events import job_events

    counts = []
    for index in range(plan.jobs):
        events = job_events(plan, index, schedule)
        gpus = int(events[0]["attrs"].get("gpus", 1)) if events else 1
        counts.append((len(events), sum(1 for e in events if _fans_out(e)), gpus))
    return counts


def ranks_cap(counts: Sequence[tuple[int, int, int]], target: int) -> int:
    """The fewest ranks per job (capped by its GPUs) that give ``target`` events."""
    for cap in range(1, MAX_RANKS + 1):
        if sum(base + fan * (min(gpus, cap) - 1) for base, fan, gpus in counts) >= target:
            return cap
    return MAX_RANKS


def fleet_lines(plan: Any, schedule: Any, cap: int) -> Iterator[bytes]:
    """Every job's events with its ranks, as compact JSON lines (what a collector ships)."""
    import orjson

    from ettweb.simulate.events import job_events

    for index in range(plan.jobs):
        events = job_events(plan, index, schedule)
        if not events:
            continue
        ranks = min(int(events[0]["attrs"].get("gpus", 1)), cap)
        rng = random.Random(f"{plan.seed}:{index}:ranks")
        for event in with_ranks(events, ranks, rng):
            yield orjson.dumps(event)


def _bad_lines(node: int) -> list[str]:
    """Lines a broken trainer or a damaged spool sends: the quarantine's everyday reasons."""
    job = f"broken-{node:03d}"
    return [
        "not json at all {" + "x" * (node % 7),
        json.dumps({"v": 1, "id": f"{job}-a", "job": job, "kind": "span", "phase": "train",
                    "start": 10.0, "end": 5.0, "attempt": 0}),
        json.dumps({"v": 1, "id": f"{job}-b", "job": job, "kind": "mark", "mark": "heartbeat"}),
        json.dumps({"v": 2, "id": f"{job}-c", "job": job, "kind": "mark", "attempt": 0,
                    "mark": "attempt_start", "ts": 1.0}),
        json.dumps({"v": 1, "id": f"{job}-d", "job": job, "kind": "nonsense", "attempt": 0}),
    ]


def _node_names(count: int) -> list[str]:
    clusters = ("east-1", "west-2", "north-3")
    return [f"{clusters[k % 3]}-node-{k:03d}" for k in range(count)]


def store_collectors(size: FleetSize) -> int:
    """Health reports of one collector per node, refreshed every run so "silent" stays true
    to the threshold: most reported seconds ago, one in twenty is silent for minutes to
    hours, some carry a backlog, drops or corrupted records, and one in twenty-five had its
    credential refused since its last report (the page's rejected rows)."""
    from django.db import transaction
    from django.utils import timezone

    from ettweb.ingest.credentials import BATCH, record_rejection
    from ettweb.ingest.models import CollectorHealth, CollectorRejection

    rng = random.Random(f"{size.seed}:collectors")
    names = _node_names(max(3, min(300, size.jobs // 60)))
    now = timezone.now()
    with transaction.atomic():
        CollectorHealth.objects.all().delete()
        CollectorRejection.objects.all().delete()
        for k, name in enumerate(names):
            silent = k % 20 == 7
            CollectorHealth.objects.create(
                source=name, collector_id=f"col-{k:03d}",
                backlog_events=rng.choice((0, 0, 0, 12, 480, 20_000)),
                backlog_bytes=rng.choice((0, 4096, 2_000_000)),
                shipped_events=rng.randint(10_000, 5_000_000),
                dropped_events=rng.choice((0,) * 9 + (rng.randint(1, 5000),)),
                corrupted_records=rng.choice((0,) * 19 + (rng.randint(1, 20),)),
                spool_files=rng.randint(0, 12), last_success_ts=time.time() - rng.uniform(0, 60),
                report_epoch=time.time() - 86400, report_seq=rng.randint(1, 10_000))
            ago = rng.uniform(600, 36_000) if silent else rng.uniform(0, 60)
            CollectorHealth.objects.filter(source=name).update(
                updated_at=now - timedelta(seconds=ago))
            if k % 25 == 11:
                record_rejection(name, f"col-{k:03d}", f"revoked collector 'col-{k:03d}'",
                                 BATCH, now)
    return len(names)


def _quarantine(size: FleetSize) -> int:
    """Bad lines from a third of the nodes, through the worker's ingest logic."""
    from ettweb.ingest.batches import ingest_lines

    rejected = 0
    for k, name in enumerate(_node_names(max(3, min(300, size.jobs // 60)))):
        if k % 3 == 0:
            rejected += ingest_lines(_bad_lines(k), source=name).rejected
    return rejected


@dataclass(frozen=True)
class LoadInfo:
    """What the database holds and what loading it cost (this run's, or the first run's)."""

    events: int
    jobs: int
    ranks_cap: int
    rollouts: int
    quarantined_lines: int
    generate_s: float
    import_s: float
    refresh_s: float
    loaded_at: str
    reused: bool = False

    @property
    def load_s(self) -> float:
        return self.generate_s + self.import_s + self.refresh_s


def load_fleet(size: FleetSize) -> LoadInfo:
    """Generate, import and refresh the fleet into the (empty, migrated) current database."""
    from ettweb.ingest.imports import import_lines, refresh_imported
    from ettweb.simulate.store import upsert_rollouts

    began = time.perf_counter()
    plan, schedule = _plan(size)
    counts = _job_counts(plan, schedule)
    cap = ranks_cap(counts, size.events)
    expected = sum(base + fan * (min(gpus, cap) - 1) for base, fan, gpus in counts)
    generate_s = time.perf_counter() - began
    say(f"{size.jobs:,} jobs over {size.days} days: up to {cap} ranks a job, "
         f"{expected:,} events; importing through the ingest path…")
    began = time.perf_counter()
    progress = Progress("imported", expected)
    summary = import_lines(fleet_lines(plan, schedule, cap), source=SOURCE, progress=progress)
    import_s = time.perf_counter() - began
    say(f"{summary.line()} in {import_s:.0f} s; refreshing {len(summary.jobs):,} jobs' rollups…")
    began = time.perf_counter()
    refresh_imported(summary.jobs, progress=Progress("refreshed", len(summary.jobs)))
    refresh_s = time.perf_counter() - began
    rejected = _quarantine(size)
    rollouts = upsert_rollouts(schedule)
    _vacuum_analyze()
    return LoadInfo(events=summary.stored, jobs=len(summary.jobs), ranks_cap=cap,
                    rollouts=rollouts, quarantined_lines=rejected,
                    generate_s=round(generate_s, 1), import_s=round(import_s, 1),
                    refresh_s=round(refresh_s, 1),
                    loaded_at=datetime.now(UTC).isoformat(timespec="seconds"))


class Progress:
    """A progress callback that says how far it got about every 10%."""

    def __init__(self, verb: str, total: int) -> None:
        self.verb, self.total, self.done, self.began = verb, max(1, total), 0, time.perf_counter()
        self.next_say = self.total // 10

    def __call__(self, count: int) -> None:
        self.done += count
        if self.done >= self.next_say:
            self.next_say += self.total // 10 or 1
            rate = self.done / max(1e-9, time.perf_counter() - self.began)
            say(f"  {self.verb} {self.done:,} of {self.total:,} ({rate:,.0f}/s)")


def _vacuum_analyze() -> None:
    """What autovacuum does to a production table within minutes: planner statistics and the
    visibility map (index-only scans), so the first measurement is not of a cold new table."""
    from django.db import connection

    from ettweb.ingest.models import Event as StoredEvent
    from ettweb.ingest.models import Job

    with connection.cursor() as cursor:
        for table in (StoredEvent._meta.db_table, Job._meta.db_table):
            cursor.execute(f"VACUUM ANALYZE {table}")
