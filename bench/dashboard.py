"""``python -m bench.dashboard``: every dashboard page and API endpoint at fleet scale.

Issue 14 asks that every page answer in a blink for a fleet infra owners live in: at least
5,000,000 events of 20,000 jobs over 180 days, p95 server time <= 300 ms. This bench builds
such a fleet and times everything a person or a program can GET.

1. **The fleet** (kept between runs): ``ettweb.simulate``'s fleet (models, teams, clusters,
   GPU sizes from 1 to 3,072, failures and restarts, seven optimizations rolled out in two
   stages each, stored as rollouts), with every rank of a job emitting its phases (that
   simulator emits rank 0 only; here ranks 1..R-1 repeat rank 0's blocking spans with
   boundaries a little inside rank 0's, as real ranks do, so the numbers barely move and the
   event count reaches ``--events``: R = min(GPUs, a cap chosen by a counting pass). It is
   stored the way production stores it: ``ettweb.ingest.imports.import_lines`` (the worker's
   own ingest logic: validation, id dedup, one partition per day, COPY into staging then
   INSERT, never ORM saves) and the rollups by the product's own ``refresh_imported``.
   Collectors report health (some silent, some with backlog, drops and corrupted records)
   and ingestion quarantines some bad lines per collector, so every page has data. The
   database (``ett_bench_dashboard`` on DATABASE_URL's server, or on the embedded server
   when it is unset; ``--quick`` uses ``ett_bench_dashboard_quick``) holds a marker table
   with the plan; a later run with the same plan reuses it (migrations still applied; the
   rollups are refreshed again when a migration was pending). ``--rebuild`` forces a load.
2. **Server time**: every URL pattern of Django's resolver (outside ``admin/`` and
   ``accounts/``, which are Django's own pages) and every GET of the OpenAPI document is
   requested ``--repeats`` times in-process through ``django.test.Client`` — the whole
   middleware stack, view, query and template, no network — with ``time.perf_counter()``
   around each request. Parameters are filled from the database (job ids, rollout ids,
   component names, models, teams, clusters, collector sources, days and ISO weeks that hold
   data) by name; a page's other parameters come from its own GET forms (selects, number
   ranges) and its same-page links (sorts, pages), read from its HTML, so filters added
   later are exercised too. A route the bench cannot fill, or one that refuses GET, is
   listed under ``unmeasured`` with the reason, never skipped silently.
   Before timing, beat's warm pass runs once (``ettweb.rollouts.warm``: every rollout's
   impact at the windows the rollout page links to, its bootstrap draws stored) and this
   process forgets its own draws, so requests find them where a web server would: in the
   table. After timing, ``cold_impacts`` prices the other case: every rollout's impact at
   windows no warm pass computes, drawn afresh (reported beside the pages, not in the
   target).
3. **The raw path**: for one representative request per page (the last 30 data days where
   it takes a range, the job with the most events, a mid-period rollout with its default
   window, the last complete week with its 8-week history), the same numbers computed from
   raw events: the jobs the request covers, their events loaded from the events table as
   ``ettweb.rollups.refresh.load_events`` does (200 jobs at a time), ``attribute_job`` on each
   and the per-day split over the range. The ratio is raw ms / the stored request's server
   ms (median of 5). Each distinct scope is computed once and shared by the pages covering
   it; pages that read no event-derived numbers (the collectors, forms, the rollout list)
   say so instead.

The last line of output is one JSON object: sizes, load time, per page and endpoint p50/p95,
the raw path and ratio, the target and ``meets_target`` per page and overall.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from html.parser import HTMLParser
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode

from bench.rollouts import percentile
from bench.rollup_cost import _setup_django

Event = dict[str, Any]
DATABASE: Final = "ett_bench_dashboard"
QUICK_DATABASE: Final = "ett_bench_dashboard_quick"
TARGET_P95_MS: Final = 300.0
#: Bumped when the way the fleet is drawn changes, so an old database is not reused.
FLEET_VERSION: Final = 1
MARKER_TABLE: Final = "bench_dashboard_fleet"
BENCH_USER: Final = "bench-dashboard"
SOURCE: Final = "bench.dashboard"
#: Phases every rank of a job runs (the rest are the supervisor's: scheduling, container
#: start, publishing, background uploads).
RANK_PHASES: Final = frozenset({
    "rendezvous", "process_group_init", "model_init", "sharding_plan", "data_init", "compile",
    "train", "checkpoint_save", "checkpoint_load", "eval", "shutdown"})
MAX_RANKS: Final = 64
RAW_CHUNK_JOBS: Final = 200
REPRESENTATIVE_REPEATS: Final = 5
REPRESENTATIVE_DAYS: Final = 30
#: Django's own pages, not the dashboard: not measured, listed as excluded.
EXCLUDED_PREFIXES: Final = {
    "admin/": "Django admin (model pages, not the dashboard)",
    "accounts/": "Django's login and password forms"}
#: Pages and endpoints whose answer holds no number derived from events: no raw path.
NO_EVENT_NUMBERS: Final = frozenset({
    "dashboard:collectors", "rollouts:list", "rollouts:create", "rollouts:edit",
    "components:phases",
    "reports:settings", "reports:unsubscribe", "healthz", "favicon",
    "api-v1:openapi-json", "api-v1:openapi-view",
    "GET /api/v1/rollouts", "GET /api/v1/rollouts/{rollout_id}", "GET /api/v1/collectors"})
#: Range lengths (days) the requests draw from: a day, a week, the default month, a quarter…
RANGE_DAYS: Final = (1, 7, 14, 30, 30, 30, 60, 90, 180)


def _say(text: str) -> None:
    print(f"[bench.dashboard] {text}", file=sys.stderr, flush=True)


# =========================================================================== the fleet

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
    from ettweb.simulate.fleet import FleetPlan, rollout_schedule
    from ettweb.simulate.store import today_utc

    # The fleet's last day is yesterday: a fleet ending today holds only what happened by
    # now, and the jobs drawn to start later today would have no events at all (34 of 20,000
    # on 2026-12-01), leaving the database short of the jobs asked for.
    plan = FleetPlan(seed=size.seed, days=size.days, jobs=size.jobs,
                     end=today_utc() - timedelta(days=1), until=time.time())
    return plan, rollout_schedule(plan)


def _job_counts(plan: Any, schedule: Any) -> list[tuple[int, int, int]]:
    """(rank-0 events, events every rank repeats, GPUs) per job: the counting pass."""
    from ettweb.simulate.fleet import job_events

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

    from ettweb.simulate.fleet import job_events

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
    _say(f"{size.jobs:,} jobs over {size.days} days: up to {cap} ranks a job, "
         f"{expected:,} events; importing through the ingest path…")
    began = time.perf_counter()
    progress = _Progress("imported", expected)
    summary = import_lines(fleet_lines(plan, schedule, cap), source=SOURCE, progress=progress)
    import_s = time.perf_counter() - began
    _say(f"{summary.line()} in {import_s:.0f} s; refreshing {len(summary.jobs):,} jobs' rollups…")
    began = time.perf_counter()
    refresh_imported(summary.jobs, progress=_Progress("refreshed", len(summary.jobs)))
    refresh_s = time.perf_counter() - began
    rejected = _quarantine(size)
    rollouts = upsert_rollouts(schedule)
    _vacuum_analyze()
    return LoadInfo(events=summary.stored, jobs=len(summary.jobs), ranks_cap=cap,
                    rollouts=rollouts, quarantined_lines=rejected,
                    generate_s=round(generate_s, 1), import_s=round(import_s, 1),
                    refresh_s=round(refresh_s, 1),
                    loaded_at=datetime.now(UTC).isoformat(timespec="seconds"))


class _Progress:
    """A progress callback that says how far it got about every 10%."""

    def __init__(self, verb: str, total: int) -> None:
        self.verb, self.total, self.done, self.began = verb, max(1, total), 0, time.perf_counter()
        self.next_say = self.total // 10

    def __call__(self, count: int) -> None:
        self.done += count
        if self.done >= self.next_say:
            self.next_say += self.total // 10 or 1
            rate = self.done / max(1e-9, time.perf_counter() - self.began)
            _say(f"  {self.verb} {self.done:,} of {self.total:,} ({rate:,.0f}/s)")


def _vacuum_analyze() -> None:
    """What autovacuum does to a production table within minutes: planner statistics and the
    visibility map (index-only scans), so the first measurement is not of a cold new table."""
    from django.db import connection

    from ettweb.ingest.models import Event as StoredEvent
    from ettweb.ingest.models import Job

    with connection.cursor() as cursor:
        for table in (StoredEvent._meta.db_table, Job._meta.db_table):
            cursor.execute(f"VACUUM ANALYZE {table}")


# =========================================================================== the database

def _admin(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


@contextmanager
def _database(name: str) -> Iterator[None]:
    """Django's default connection pointed at ``name`` for the block."""
    from django.db import connection

    original = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original


def _marker() -> dict[str, Any] | None:
    """The marker row: ``plan`` (what was asked for) and ``info`` (None until the load
    finished: a row without it is an interrupted load of this bench)."""
    if not _admin("SELECT to_regclass(%s)", [MARKER_TABLE])[0][0]:
        return None
    rows = _admin(f"SELECT plan, info FROM {MARKER_TABLE}")
    if not rows:
        return {"plan": None, "info": None}
    plan, info = (json.loads(v) if isinstance(v, str) else v for v in rows[0])
    return {"plan": plan, "info": info}


def _write_marker(size: FleetSize, info: LoadInfo | None) -> None:
    _admin(f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (plan jsonb, info jsonb)")
    _admin(f"DELETE FROM {MARKER_TABLE}")
    _admin(f"INSERT INTO {MARKER_TABLE} VALUES (%s, %s)",
           [json.dumps(size.marker()), None if info is None else json.dumps(asdict(info))])


def _pending_migrations() -> int:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def _migrate() -> int:
    """Apply pending migrations; returns how many there were."""
    from django.core.management import call_command

    pending = _pending_migrations()
    if pending:
        call_command("migrate", verbosity=0, interactive=False)
    return pending


def _state(size: FleetSize) -> str:
    """``same`` (reuse), ``interrupted`` (ours, reload), ``empty``; refuses a database that
    holds another plan or data that is not this bench's."""
    marker = _marker()
    if marker is None:
        if _admin("SELECT to_regclass('ingest_event')")[0][0]:
            raise SystemExit("bench.dashboard: the database holds data this bench did not "
                             "load; name another with --database")
        return "empty"
    if marker["info"] is None:
        return "interrupted"
    if marker["plan"] != size.marker():
        raise SystemExit(f"bench.dashboard: the database holds another plan "
                         f"({marker['plan']}); run with --rebuild to replace it")
    return "same"


@contextmanager
def fleet_database(name: str, size: FleetSize, *, rebuild: bool,
                   drop: bool) -> Iterator[LoadInfo]:
    """The fleet's database, reused when its marker holds the same plan, else (re)loaded."""
    exists = bool(_admin("SELECT 1 FROM pg_database WHERE datname = %s", [name]))
    if exists and not rebuild:
        with _database(name):
            state = _state(size)
        if state == "interrupted":
            _say("the last load of this database did not finish: loading it again")
        rebuild = state == "interrupted"
    if exists and rebuild:
        _admin(f"DROP DATABASE {name} WITH (FORCE)")
        exists = False
    if not exists:
        _admin(f"CREATE DATABASE {name}")
    try:
        with _database(name):
            yield _prepared(size)
    finally:
        if drop:
            _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _prepared(size: FleetSize) -> LoadInfo:
    from ettweb.ingest.imports import refresh_imported
    from ettweb.rollups.models import JobRollup

    marker = _marker()
    if marker is not None and marker["info"] is not None:
        info = replace(LoadInfo(**marker["info"]), reused=True)
        _say(f"reusing the fleet loaded {info.loaded_at} ({info.events:,} events, "
             f"{info.jobs:,} jobs); --rebuild loads it again")
        if _migrate():
            _say("migrations were pending: refreshing every job's rollups with them…")
            jobs = list(JobRollup.objects.values_list("job", flat=True))
            refresh_imported(jobs, progress=_Progress("refreshed", len(jobs)))
        return info
    _write_marker(size, None)
    _migrate()
    info = load_fleet(size)
    _write_marker(size, info)
    return info


# =========================================================================== parameters

@dataclass(frozen=True)
class Catalog:
    """What the database holds, to fill parameters with values that exist."""

    jobs: tuple[str, ...]
    biggest_job: str
    rollouts: tuple[tuple[int, float], ...]  # (id, epoch at), in time order
    components: tuple[str, ...]
    models: tuple[str, ...]
    teams: tuple[str, ...]
    clusters: tuple[str, ...]
    sources: tuple[str, ...]
    first_day: date
    last_day: date
    unsubscribe_token: str

    @property
    def weeks(self) -> list[str]:
        """ISO weeks whose seven days all hold data, oldest first."""
        from ettweb.queries import IsoWeek

        weeks, day = [], self.first_day + timedelta(days=(7 - self.first_day.weekday()) % 7)
        while day + timedelta(days=6) <= self.last_day:
            weeks.append(str(IsoWeek.of(day)))
            day += timedelta(days=7)
        return weeks or [str(IsoWeek.of(self.last_day))]

    def last_range(self, days: int) -> tuple[date, date]:
        return max(self.first_day, self.last_day - timedelta(days=days - 1)), self.last_day


def load_catalog(user: Any) -> Catalog:
    from django.db.models import Max, Min

    from ettweb.components.known import known_components
    from ettweb.ingest.models import CollectorHealth, Job
    from ettweb.reports.models import Subscription
    from ettweb.reports.tokens import make_token
    from ettweb.rollouts.models import Rollout
    from ettweb.rollups.models import DailyCategoryRollup, JobRollup

    days = DailyCategoryRollup.objects.aggregate(lo=Min("day"), hi=Max("day"))
    today = datetime.now(UTC).date()
    jobs = list(JobRollup.objects.order_by("job").values_list("job", flat=True))
    biggest = JobRollup.objects.order_by("-events", "job").values_list("job", flat=True).first()
    subscription, _ = Subscription.objects.get_or_create(
        user=user, defaults={"email": "bench@example.com"})
    return Catalog(
        jobs=tuple(jobs[::max(1, len(jobs) // 2000)]), biggest_job=biggest or "",
        rollouts=tuple((pk, at.timestamp()) for pk, at in
                       Rollout.objects.order_by("at").values_list("pk", "at")),
        components=tuple(known_components()),
        models=_distinct(Job, "model"), teams=_distinct(Job, "team"),
        clusters=_distinct(Job, "cluster"),
        sources=tuple(CollectorHealth.objects.values_list("source", flat=True)),
        first_day=days["lo"] or today, last_day=days["hi"] or today,
        unsubscribe_token=make_token(subscription.pk))


def _distinct(model: Any, column: str) -> tuple[str, ...]:
    values = model.objects.exclude(**{column: ""}).values_list(column, flat=True).distinct()
    return tuple(sorted(values))


class Filler:
    """Realistic values for parameters, by name, drawn from the catalog.

    ``value`` answers None for a name it does not know: the caller then falls back on what
    the page's form offers, or leaves an optional parameter out.
    """

    def __init__(self, catalog: Catalog) -> None:
        from ettweb.queries import GPU_BUCKETS, GROUPINGS, INTERVALS
        from ettweb.queries.job_list import SORTS, STATUSES

        c = catalog
        job_bits = [j.rsplit("-", 1)[-1][:3] for j in c.jobs[:50]] + list(c.models)
        self.catalog = c
        self.choices: dict[str, Sequence[Any]] = {
            "model": c.models, "team": c.teams, "cluster": c.clusters,
            "component": c.components, "source": c.sources, "job": c.jobs,
            "gpus": [label for _, _, label in GPU_BUCKETS], "status": STATUSES,
            "sort": [f"{sign}{key}" for key in SORTS for sign in ("-", "")],
            "interval": INTERVALS, "group_by": GROUPINGS, "week": c.weeks,
            # Page 1 only: a page past the last is a 400, and a random filter may leave one
            # page; the sort over every matching job, not the offset, is what costs.
            "page": (1,), "page_size": (25, 50, 100, 200),
            "top": (5, 10, 20, 50), "limit": (20, 100, 500), "rejected": (10, 50, 200),
            "window": (7, 14, 14, 28, 60, 90), "silent_after": (1, 5, 5, 60, 1440),
            "silent_after_s": (60, 300, 300, 3600), "q": job_bits, "days": (7, 30, 90),
        }

    def value(self, name: str, rng: random.Random) -> str | None:
        if name == "components":
            return ",".join(rng.sample(self.catalog.components,
                                       min(2, len(self.catalog.components))))
        values = self.choices.get(name)
        if not values:
            return None
        return str(rng.choice(values))

    def date_range(self, rng: random.Random) -> tuple[str, str]:
        """A range that holds data: a realistic length ending on a random data day."""
        c = self.catalog
        span = (c.last_day - c.first_day).days + 1
        length = min(span, rng.choice(RANGE_DAYS))
        end = c.last_day - timedelta(days=rng.randint(0, span - length))
        return (end - timedelta(days=length - 1)).isoformat(), end.isoformat()

    def day(self, rng: random.Random) -> str:
        c = self.catalog
        return (c.first_day + timedelta(days=rng.randint(0, (c.last_day - c.first_day).days))
                ).isoformat()

    def path_value(self, route: str, name: str, rng: random.Random) -> str | None:
        """A path parameter's value: known by its name, or by the route it sits in."""
        c = self.catalog
        if name in ("job", "job_id") and c.jobs:
            return rng.choice(c.jobs)
        if c.rollouts and (name == "rollout_id" or ("rollout" in route and name in ("id", "pk"))):
            return str(rng.choice(c.rollouts)[0])
        if name in ("name", "component") and "component" in route and c.components:
            return rng.choice(c.components)
        if name == "token" and "unsubscribe" in route:
            return c.unsubscribe_token
        if name in self.choices and name not in ("page", "page_size"):
            return self.value(name, rng)
        return None


# =========================================================================== discovery

@dataclass(frozen=True)
class Param:
    """One query parameter: from the OpenAPI document, or from a page's GET form."""

    name: str
    required: bool = False
    kind: str = "str"  # str, int, date, bool
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    value: str | None = None  # a hidden input's fixed value


@dataclass
class Target:
    """A page or endpoint to time: its route, how to fill it, what it answered."""

    kind: str  # "page" or "endpoint"
    key: str  # the route ("/jobs/<path:job>/") or "GET /api/v1/..."
    name: str  # URL name, or the operation's
    path_params: tuple[str, ...]
    params: list[Param] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    auth: str = "session"


_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
_OPENAPI_PARAM = re.compile(r"{(\w+)}")


def resolver_routes() -> list[tuple[str, str]]:
    """Every (route, URL name) of the root URLconf, routes as written (``jobs/<path:job>/``);
    a regex route keeps its regex (it cannot be filled: reported as unmeasured)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    found: list[tuple[str, str]] = []

    def walk(patterns: Iterable[Any], prefix: str, namespace: str) -> None:
        for item in patterns:
            route = prefix + str(item.pattern)
            if isinstance(item, URLResolver):
                inner = f"{namespace}{item.namespace}:" if item.namespace else namespace
                walk(item.url_patterns, route, inner)
            elif isinstance(item, URLPattern):
                found.append((route, f"{namespace}{item.name or item.lookup_str}"))

    walk(get_resolver().url_patterns, "", "")
    return found


def discover_pages(api_prefix: str = "api/v1/") -> tuple[list[Target], list[dict[str, Any]],
                                                         list[dict[str, str]]]:
    """Pages to time, pages excluded (with why) and routes that cannot be filled (with why).

    The API's endpoints come from its OpenAPI document instead (``discover_endpoints``); its
    documentation pages (the document itself and the docs page) are pages here.
    """
    targets: list[Target] = []
    excluded: list[dict[str, Any]] = []
    unmeasured: list[dict[str, str]] = []
    for route, name in resolver_routes():
        reason = next((why for prefix, why in EXCLUDED_PREFIXES.items()
                       if route.startswith(prefix)), None)
        if reason:
            prefix = "/" + route.split("/", 1)[0] + "/"
            group = next((g for g in excluded if g["prefix"] == prefix), None)
            if group is None:
                excluded.append({"prefix": prefix, "routes": 0, "reason": reason})
                group = excluded[-1]
            group["routes"] += 1
            continue
        if route.startswith(api_prefix) and not name.endswith(("openapi-json", "openapi-view")):
            continue  # an endpoint: from the OpenAPI document
        if route.startswith("^") or "(?" in route:
            unmeasured.append({"route": route, "name": name, "reason": "a regex route"})
            continue
        params = tuple(match.group(2) for match in _CONVERTER.finditer(route))
        targets.append(Target("page", "/" + route, name, params))
    return targets, excluded, unmeasured


def discover_endpoints(document: dict[str, Any]) -> list[Target]:
    """Every GET operation of the OpenAPI document, with its query parameters."""
    targets = []
    for path, operations in sorted(document.get("paths", {}).items()):
        operation = operations.get("get")
        if operation is None:
            continue
        params = [_openapi_param(p, document) for p in operation.get("parameters", [])
                  if p.get("in") == "query"]
        targets.append(Target("endpoint", f"GET {path}", operation.get("operationId", path),
                              tuple(_OPENAPI_PARAM.findall(path)), params))
    return targets


def _openapi_param(spec: dict[str, Any], document: dict[str, Any]) -> Param:
    schema = _schema(spec.get("schema", {}), document)
    kind = {"integer": "int", "boolean": "bool"}.get(schema.get("type", ""), "str")
    if schema.get("format") == "date":
        kind = "date"
    return Param(spec["name"], bool(spec.get("required")), kind,
                 tuple(str(v) for v in schema.get("enum", ())),
                 schema.get("minimum"), schema.get("maximum"))


def _schema(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema with ``$ref`` resolved and ``anyOf [T, null]`` reduced to T."""
    for _ in range(5):
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in schema:
            schema = next((s for s in schema["anyOf"] if s.get("type") != "null"), {})
        else:
            break
    return schema


class PageForms(HTMLParser):
    """A page's own GET forms (their fields) and its same-page links (``?sort=…``).

    Only forms that submit to the page itself (no ``action``, or ``action`` is the path) and
    by GET; POST forms (edits) and forms elsewhere (a top bar's search) are someone else's.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.params: dict[str, Param] = {}
        self.links: list[dict[str, str]] = []
        self.lists: dict[str, list[str]] = defaultdict(list)
        self._in_form = False
        self._select: str | None = None
        self._options: list[str] = []
        self._datalist: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._in_form = (a.get("method", "get").lower() == "get"
                             and a.get("action", "") in ("", self.path, "."))
        elif tag == "a" and a.get("href", "").startswith("?"):
            query = dict(parse_qsl(a["href"][1:]))
            if "format" not in query:
                self.links.append(query)
        elif tag == "datalist":
            self._datalist = a.get("id", "")
        elif tag == "option":
            self._option(a)
        elif self._in_form and a.get("name"):
            self._field(tag, a)

    def _option(self, a: dict[str, str]) -> None:
        if self._select is not None:
            self._options.append(a.get("value", ""))
        elif self._datalist is not None and a.get("value"):
            self.lists[self._datalist].append(a["value"])

    def _field(self, tag: str, a: dict[str, str]) -> None:
        name, kind = a["name"], a.get("type", "text")
        if tag == "select":
            self._select, self._options = name, []
        elif tag == "input" and kind == "hidden":
            self.params[name] = Param(name, value=a.get("value", ""))
        elif tag == "input" and kind in ("checkbox", "radio"):
            known = self.params.get(name)
            values = (*(known.choices if known else ()), a.get("value") or "on")
            self.params[name] = Param(name, kind="bool", choices=values)
        elif tag == "input" and kind not in ("submit", "button", "reset"):
            self.params[name] = Param(
                name, kind={"number": "int", "date": "date"}.get(kind, "str"),
                choices=(f"@{a['list']}",) if a.get("list") else (),
                minimum=int(a["min"]) if a.get("min", "").lstrip("-").isdigit() else None,
                maximum=int(a["max"]) if a.get("max", "").lstrip("-").isdigit() else None)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False
        elif tag == "select" and self._select is not None:
            options = tuple(v for v in self._options if v)
            self.params[self._select] = Param(self._select, choices=options)
            self._select = None
        elif tag == "datalist":
            self._datalist = None

    def resolved(self) -> list[Param]:
        """The fields, datalist references replaced by the list's values."""
        return [replace(p, choices=tuple(self.lists.get(p.choices[0][1:], ())))
                if p.choices[:1] and p.choices[0].startswith("@") else p
                for p in self.params.values()]


# =========================================================================== requests

class Unfillable(Exception):
    """A parameter the bench has no value for: the target is reported as unmeasured."""


def fill_path(target: Target, filler: Filler, rng: random.Random,
              fixed: dict[str, str] | None = None) -> str:
    """The target's path with its parameters filled (``fixed`` values first)."""
    route = target.key.removeprefix("GET ")
    values = {}
    for name in target.path_params:
        value = filler.path_value(route, name, rng)
        if value is None:
            raise Unfillable(f"no value for path parameter {name!r}")
        values[name] = quote((fixed or {}).get(name) or value, safe="")
    if target.kind == "endpoint":
        return _OPENAPI_PARAM.sub(lambda m: values[m.group(1)], route)
    return _CONVERTER.sub(lambda m: values[m.group(2)], route)


def query_for(params: Sequence[Param], filler: Filler, rng: random.Random) -> dict[str, str]:
    """Query values for one request: required ones always, each optional one half the time;
    a range's two ends are drawn together (both seven times in ten, one end alone one time
    in ten each, neither otherwise), so ``date_from`` is never after ``date_to``."""
    names = {p.name for p in params}
    query: dict[str, str] = {}
    drawn: set[str] = set()
    if {"date_from", "date_to"} <= names:
        drawn = {"date_from", "date_to"}
        required = any(p.required for p in params if p.name in drawn)
        low, high = filler.date_range(rng)
        roll = rng.random()
        if required or roll < 0.7:
            query["date_from"], query["date_to"] = low, high
        elif roll < 0.8:
            query["date_from"] = low
        elif roll < 0.9:
            query["date_to"] = high
    for param in params:
        if param.name in query or param.name in drawn:
            continue
        if param.value is not None and (rng.random() < 0.5
                                        or filler.value(param.name, rng) is None):
            query[param.name] = param.value  # a hidden input: as the page sent it, or varied
        elif param.required or rng.random() < 0.5:
            value = _value(param, filler, rng)
            if value is None and param.required:
                raise Unfillable(f"no value for required parameter {param.name!r}")
            if value is not None:
                query[param.name] = value
    return query


def _value(param: Param, filler: Filler, rng: random.Random) -> str | None:
    known = filler.value(param.name, rng)
    if known is not None and (not param.choices or known in param.choices):
        return known
    if param.choices:
        return rng.choice(param.choices)
    if param.kind == "date":
        return filler.day(rng)
    if param.kind == "int" and param.minimum is not None:
        top = param.maximum if param.maximum is not None else param.minimum + 100
        return str(rng.randint(param.minimum, min(top, param.minimum + 100)))
    if param.kind == "bool":
        return rng.choice(("true", "false"))
    return None


def _url(path: str, query: dict[str, str]) -> str:
    query = {k: v for k, v in query.items() if v != ""}
    return f"{path}?{urlencode(query)}" if query else path


@dataclass
class Timing:
    samples_ms: list[float] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    sample_urls: list[str] = field(default_factory=list)


def timed_get(client: Any, url: str, headers: dict[str, str]) -> tuple[float, Any]:
    began = time.perf_counter()
    response = client.get(url, headers=headers)
    return 1000.0 * (time.perf_counter() - began), response


class Measurer:
    """Times targets with one logged-in client (a superuser: every page is open to it)."""

    def __init__(self, client: Any, token: str, filler: Filler, seed: int) -> None:
        self.client, self.filler, self.seed = client, filler, seed
        self.bearer = {"Authorization": f"Bearer {token}"}

    def prepare(self, target: Target) -> str | None:
        """First request (not timed: imports, templates): auth, forms, links; or why not."""
        rng = random.Random(f"{self.seed}:{target.key}:prepare")
        try:
            path = fill_path(target, self.filler, rng)
            url = path if target.kind == "page" else self.next_url(target, rng)
        except Unfillable as exc:
            return str(exc)
        if target.kind == "endpoint":
            target.headers, target.auth = self.bearer, "bearer"
        response = self.client.get(url, headers=target.headers)
        if response.status_code in (401, 403) and target.kind == "page":
            target.headers, target.auth = self.bearer, "bearer"
            response = self.client.get(url, headers=target.headers)
        if response.status_code >= 400:
            return f"GET {url} answered {response.status_code}"
        if target.kind == "page" and "html" in response.get("Content-Type", ""):
            forms = PageForms(path)
            forms.feed(response.content.decode("utf-8", errors="replace"))
            target.params, target.links = forms.resolved(), forms.links
        return None

    def next_url(self, target: Target, rng: random.Random) -> str:
        path = fill_path(target, self.filler, rng)
        if target.links and rng.random() < 0.25:
            return _url(path, rng.choice(target.links))
        return _url(path, query_for(target.params, self.filler, rng))

    def measure(self, target: Target, repeats: int) -> Timing:
        rng = random.Random(f"{self.seed}:{target.key}")
        timing = Timing()
        for _ in range(repeats):
            url = self.next_url(target, rng)
            ms, response = timed_get(self.client, url, target.headers)
            if response.status_code >= 400:
                if len(timing.errors) < 3:
                    timing.errors.append({"url": url, "status": response.status_code,
                                          "body": response.content[:200].decode(errors="replace")})
                continue
            timing.samples_ms.append(ms)
            if len(timing.sample_urls) < 3:
                timing.sample_urls.append(url)
        return timing

    def representative(self, target: Target) -> tuple[str, dict[str, str]]:
        """The request the raw path is compared on, and its parameters (path and query)."""
        c = self.filler.catalog
        fixed: dict[str, str] = {}
        if c.biggest_job:
            fixed["job"] = fixed["job_id"] = c.biggest_job
        if c.rollouts:
            fixed["rollout_id"] = str(c.rollouts[len(c.rollouts) // 2][0])
        if "checkpointing" in c.components:
            fixed["name"] = fixed["component"] = "checkpointing"
        path = fill_path(target, self.filler, random.Random(0), fixed)
        names = {p.name for p in target.params}
        query: dict[str, str] = {}
        if {"date_from", "date_to"} <= names:
            low, high = c.last_range(REPRESENTATIVE_DAYS)
            query = {"date_from": low.isoformat(), "date_to": high.isoformat()}
        if "week" in names:
            query["week"] = c.weeks[-1]
        rng = random.Random(0)
        for param in target.params:
            if param.required and param.name not in query:
                query[param.name] = _value(param, self.filler, rng) or ""
        chosen = {k: v for k, v in fixed.items() if k in target.path_params}
        return _url(path, query), {**chosen, **query}

    def stored_ms(self, target: Target, url: str) -> float:
        return statistics.median(timed_get(self.client, url, target.headers)[0]
                                 for _ in range(REPRESENTATIVE_REPEATS))


# =========================================================================== the raw path

@dataclass(frozen=True)
class RawScope:
    """The events a request's numbers come from: one job, or every job over some days."""

    first_day: date
    last_day: date
    job: str = ""

    @property
    def label(self) -> str:
        if self.job:
            return f"job {self.job}"
        return f"{self.first_day}..{self.last_day}"


def scope_for(target: Target, params: dict[str, str], catalog: Catalog) -> RawScope | None:
    """What the representative request covers; None when it reads no event numbers."""
    from ettweb.queries import IsoWeek
    from ettweb.queries.impact import DEFAULT_WINDOW_DAYS

    if target.name in NO_EVENT_NUMBERS or target.key in NO_EVENT_NUMBERS:
        return None
    job = params.get("job") or params.get("job_id")
    if job:
        return RawScope(catalog.first_day, catalog.last_day, job)
    if params.get("rollout_id"):
        at = dict(catalog.rollouts)[int(params["rollout_id"])]
        day = datetime.fromtimestamp(at, UTC).date()
        window = timedelta(days=int(params.get("window") or DEFAULT_WINDOW_DAYS))
        return RawScope(day - window, day + window)
    if params.get("week"):
        week = IsoWeek.parse(params["week"]).range
        return RawScope(week.date_from - timedelta(days=49), week.date_to)  # 8 weeks' history
    if params.get("date_from") and params.get("date_to"):
        return RawScope(date.fromisoformat(params["date_from"]),
                        date.fromisoformat(params["date_to"]))
    return RawScope(catalog.first_day, catalog.last_day)  # everything the database holds


def _epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _jobs_in(scope: RawScope) -> list[str]:
    """Jobs with an event in the scope's days (a day's margin each side: a span that started
    the day before still counts), from the events table."""
    from django.db import connection

    from ettweb.ingest.models import Event as StoredEvent

    if scope.job:
        return [scope.job]
    low = _epoch(scope.first_day) - 86400
    high = _epoch(scope.last_day) + 2 * 86400
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT job FROM {StoredEvent._meta.db_table} "
                       'WHERE coalesce("start", "ts") >= %s AND coalesce("start", "ts") < %s',
                       [low, high])
        return sorted(row[0] for row in cursor.fetchall())


def raw_numbers(scope: RawScope) -> dict[str, Any]:
    """The scope's numbers from raw events (engine on every job), timed from the first read.

    ETT% (GPU-weighted), lost GPU-seconds per category and the 10 jobs that lost most, over
    the scope's days — what the pages show, computed the way they would be without rollups.
    """
    from ettweb.attribution.engine import attribute_job, gc_paused, per_day
    from ettweb.rollups.refresh import load_events

    began = time.perf_counter()
    totals: dict[str, float] = defaultdict(float)
    lost_by_job: dict[str, float] = {}
    events = 0
    jobs = _jobs_in(scope)
    with gc_paused():
        for at in range(0, len(jobs), RAW_CHUNK_JOBS):
            for job, job_events in load_events(jobs[at:at + RAW_CHUNK_JOBS]).items():
                events += len(job_events)
                attribution = attribute_job(job_events)
                lost = 0.0
                for day, categories in per_day(attribution.segments).items():
                    if scope.first_day <= day <= scope.last_day:
                        for category, gpu_s in categories.items():
                            totals[category] += gpu_s
                            lost += 0.0 if category == "productive" else gpu_s
                lost_by_job[job] = lost
    top = heapq.nlargest(10, lost_by_job.items(), key=lambda kv: kv[1])
    ms = 1000.0 * (time.perf_counter() - began)
    wall = sum(totals.values())
    return {"raw_ms": round(ms, 1), "raw_jobs": len(jobs), "raw_events": events,
            "raw_ett_pct": round(100.0 * totals.get("productive", 0.0) / wall, 4)
            if wall else None, "raw_top_job": top[0][0] if top else None}


def stored_ett_pct(scope: RawScope) -> float | None:
    """The same ETT% from the rollups (the check that both paths are the same numbers)."""
    from ettweb.queries import DateRange, TrendQuery, calculate
    from ettweb.rollups.models import JobRollup

    if scope.job:
        row = JobRollup.objects.filter(job=scope.job).values_list("ett_pct", flat=True).first()
        return None if row is None else round(float(row), 4)
    trend = calculate(TrendQuery(DateRange(scope.first_day, scope.last_day)))
    return round(trend.ett_pct, 4) if trend.wall_gpu_s else None


# =========================================================================== the run

def _summary(target: Target, timing: Timing) -> dict[str, Any]:
    samples = timing.samples_ms
    p95 = round(percentile(samples, 95), 1) if samples else None
    return {
        "name": target.name, "auth": target.auth, "requests": len(samples) + len(timing.errors),
        "errors": len(timing.errors), "error_samples": timing.errors,
        "p50_ms": round(percentile(samples, 50), 1) if samples else None, "p95_ms": p95,
        "max_ms": round(max(samples), 1) if samples else None,
        "params": sorted(p.name for p in target.params), "sample_urls": timing.sample_urls,
        "meets_target": bool(samples) and not timing.errors and p95 is not None
        and p95 <= TARGET_P95_MS}


def _bench_client() -> tuple[Any, Any, str]:
    from django.contrib.auth.models import User
    from django.test import Client

    from ettweb.access.tokens import issue_token

    user, _ = User.objects.get_or_create(username=BENCH_USER,
                                         defaults={"is_staff": True, "is_superuser": True})
    client = Client(raise_request_exception=False)  # a 500 is a measured error, not a crash
    client.force_login(user)
    return client, user, issue_token(user, "bench.dashboard")


def measure_all(repeats: int, seed: int) -> dict[str, Any]:
    """Discover every page and endpoint, time each, then the raw path per scope."""
    client, user, token = _bench_client()
    catalog = load_catalog(user)
    measurer = Measurer(client, token, Filler(catalog), seed)
    pages, excluded, unmeasured = discover_pages()
    document = client.get("/api/v1/openapi.json").json()
    targets = pages + discover_endpoints(document)
    results: dict[str, dict[str, dict[str, Any]]] = {"page": {}, "endpoint": {}}
    measured: list[Target] = []
    for target in targets:
        why = measurer.prepare(target)
        if why is not None:
            unmeasured.append({"route": target.key, "name": target.name, "reason": why})
            _say(f"unmeasured {target.key}: {why}")
            continue
        timing = measurer.measure(target, repeats)
        results[target.kind][target.key] = _summary(target, timing)
        measured.append(target)
        row = results[target.kind][target.key]
        errors = f", {row['errors']} errors" if row["errors"] else ""
        _say(f"{target.key}: p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms{errors}")
    _raw_paths(measurer, measured, results, catalog)
    return {"pages": results["page"], "endpoints": results["endpoint"],
            "unmeasured": unmeasured, "excluded": excluded, "catalog": {
                "first_day": catalog.first_day.isoformat(),
                "last_day": catalog.last_day.isoformat(), "biggest_job": catalog.biggest_job,
                "rollouts": len(catalog.rollouts), "components": len(catalog.components),
                "collectors": len(catalog.sources)}}


def _raw_paths(measurer: Measurer, targets: Sequence[Target],
               results: dict[str, dict[str, dict[str, Any]]], catalog: Catalog) -> None:
    """Per target: the representative request's stored ms, its scope's raw ms, the ratio."""
    raw: dict[RawScope, dict[str, Any]] = {}
    for target in targets:
        url, params = measurer.representative(target)
        row = results[target.kind][target.key]
        row["representative"] = url
        row["stored_ms"] = round(measurer.stored_ms(target, url), 1)
        scope = scope_for(target, params, catalog)
        if scope is None:
            row.update(raw_scope=None, raw_ms=None, ratio=None)
            continue
        if scope not in raw:
            _say(f"raw path over {scope.label}…")
            raw[scope] = {**raw_numbers(scope), "stored_ett_pct": stored_ett_pct(scope)}
            _say(f"  {raw[scope]['raw_events']:,} events of {raw[scope]['raw_jobs']:,} jobs "
                 f"in {raw[scope]['raw_ms']:,.0f} ms")
        row.update(raw_scope=scope.label, **raw[scope])
        row["ratio"] = (float(f"{row['raw_ms'] / row['stored_ms']:.3g}") if row["stored_ms"]
                        else None)


#: Windows no warm pass computes (``cold_impacts`` checks them against WARM_WINDOWS).
COLD_WINDOWS: Final = (21, 45)


def warm_as_beat_does() -> dict[str, Any]:
    """Run beat's warm pass (``ett.warm_rollout_impacts``) once, then forget this process's
    own draws: the measured requests find them where a web server would, in the table."""
    from ettweb.queries.impact import draws as impact_draws
    from ettweb.rollouts.warm import WARM_WINDOWS, warm_impacts

    stats = warm_impacts()
    impact_draws._DRAWS.clear()
    _say(f"warm pass (as beat runs it): {stats.impacts} impacts in {stats.seconds:.1f} s")
    return {"impacts": stats.impacts, "seconds": round(stats.seconds, 1),
            "windows": list(WARM_WINDOWS)}


def cold_impacts() -> dict[str, Any]:
    """What a window nobody computed ahead costs: every rollout's impact at
    ``COLD_WINDOWS`` through the API (server time), with the stored draws neither read nor
    written and this process's emptied before each request, so every one draws afresh.
    Reported beside the pages, not part of their target: it is the first request's price
    for a window the page does not link to."""
    from ettweb.queries.impact import draws as impact_draws
    from ettweb.rollouts.models import Rollout
    from ettweb.rollouts.warm import WARM_WINDOWS

    if set(COLD_WINDOWS) & set(WARM_WINDOWS):
        raise RuntimeError(f"cold windows {COLD_WINDOWS} overlap the warmed {WARM_WINDOWS}")
    client, _, token = _bench_client()
    samples: list[float] = []
    stored = impact_draws._stored_draws  # a request never stores draws: hiding them is enough
    impact_draws._stored_draws = lambda key: None
    try:
        for rollout_id in Rollout.objects.order_by("id").values_list("id", flat=True):
            for window in COLD_WINDOWS:
                impact_draws._DRAWS.clear()
                url = f"/api/v1/rollouts/{rollout_id}/impact?window={window}"
                began = time.perf_counter()
                response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")
                samples.append((time.perf_counter() - began) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status_code}")
    finally:
        impact_draws._stored_draws = stored
    row = {"windows": list(COLD_WINDOWS), "requests": len(samples),
           "p50_ms": round(percentile(samples, 50), 1),
           "p95_ms": round(percentile(samples, 95), 1)}
    _say(f"cold impacts (windows {COLD_WINDOWS}, drawn afresh): p50 {row['p50_ms']} ms, "
         f"p95 {row['p95_ms']} ms")
    return row


def _table(result: dict[str, Any]) -> str:
    lines = [f"{'target':<44} {'n':>4} {'err':>3} {'p50 ms':>8} {'p95 ms':>8} "
             f"{'raw ms':>10} {'ratio':>8}  ok"]
    for group in ("pages", "endpoints"):
        for key, row in result[group].items():
            raw = f"{row['raw_ms']:,.0f}" if row.get("raw_ms") is not None else "-"
            ratio = "-" if row.get("ratio") is None else (
                f"{row['ratio']:,.0f}x" if row["ratio"] >= 100 else f"{row['ratio']:.3g}x")
            lines.append(f"{key[:44]:<44} {row['requests']:>4} {row['errors']:>3} "
                         f"{_ms(row['p50_ms']):>8} {_ms(row['p95_ms']):>8} {raw:>10} "
                         f"{ratio:>8}  {'yes' if row['meets_target'] else 'NO'}")
    for row in result["unmeasured"]:
        lines.append(f"{row['route'][:44]:<44} unmeasured: {row['reason']}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    _setup_django()
    size = FleetSize(seed=args.seed, jobs=args.jobs, days=args.days, events=args.events)
    with fleet_database(args.database, size, rebuild=args.rebuild, drop=args.drop) as info:
        collectors = store_collectors(size)
        warm = warm_as_beat_does()
        _say(f"timing every page and endpoint, {args.repeats} requests each…")
        began = time.perf_counter()
        measured = measure_all(args.repeats, args.seed)
        measure_s = time.perf_counter() - began
        cold = cold_impacts()
    rows = [*measured["pages"].values(), *measured["endpoints"].values()]
    return {
        "benchmark": "dashboard", "seed": args.seed, "database": args.database,
        "jobs": info.jobs, "jobs_target": args.jobs, "days": args.days, "events": info.events,
        "events_target": args.events, "ranks_cap": info.ranks_cap, "rollouts": info.rollouts,
        "collectors": collectors, "quarantined_lines": info.quarantined_lines,
        "reused": info.reused, "loaded_at": info.loaded_at, "load_s": round(info.load_s, 1),
        "load_parts_s": {"generate": info.generate_s, "import": info.import_s,
                         "refresh": info.refresh_s},
        "load_events_per_s": round(info.events / info.load_s) if info.load_s else None,
        "repeats": args.repeats, "timing": "in-process django.test.Client, perf_counter "
                                           "around each request (server time, no network)",
        "measure_s": round(measure_s, 1), "target_p95_ms": TARGET_P95_MS, **measured,
        "warm_pass": warm, "cold_impacts": cold,
        "meets_target": bool(rows) and all(row["meets_target"] for row in rows)
        and not measured["unmeasured"] and info.jobs >= args.jobs
        and info.events >= args.events,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, help="simulated jobs (20,000; --quick 300)")
    parser.add_argument("--days", type=int, help="days they cover (180; --quick 30)")
    parser.add_argument("--events", type=int,
                        help="at least this many events, through ranks (5,000,000; --quick 30,000)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (0)")
    parser.add_argument("--repeats", type=int,
                        help="requests per page and endpoint (30; --quick 5)")
    parser.add_argument("--quick", action="store_true",
                        help="a small fleet in its own database: a smoke run of a minute or two")
    parser.add_argument("--rebuild", action="store_true",
                        help="load the fleet again even if the database holds it")
    parser.add_argument("--database", help=f"database name ({DATABASE}; --quick {QUICK_DATABASE})")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    args = parser.parse_args(argv)
    full = {"jobs": 20_000, "days": 180, "events": 5_000_000, "repeats": 30,
            "database": DATABASE}
    quick = {"jobs": 300, "days": 30, "events": 30_000, "repeats": 5, "database": QUICK_DATABASE}
    for name, default in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.jobs < 1 or not 14 <= args.days <= 3650 or args.repeats < 1 or args.events < 0:
        parser.error("--jobs and --repeats must be at least 1, --days between 14 and 3650, "
                     "--events not negative")
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.database):
        parser.error("--database must be a plain lower-case name (letters, digits, _)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(_table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
