"""The dashboard bench's own database: created, loaded once, and reused between runs.

Why kept: loading a fleet of millions of events takes far longer than timing its pages, so a
database (``ett_bench_dashboard`` on DATABASE_URL's server, or on the embedded server when it
is unset; ``--quick`` uses ``ett_bench_dashboard_quick``) holds a marker table with the plan
it was loaded for. A later run with the same plan reuses it: migrations are still applied,
and the rollups refreshed again when one was pending. A marker without load info is a load
that did not finish, loaded again; a database with another plan, or with data this bench did
not load, is refused. ``--rebuild`` forces a load.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any, Final

from bench.dashboard_stages import say
from bench.dashboard_stages.fleet import FleetSize, LoadInfo, Progress, load_fleet

MARKER_TABLE: Final = "bench_dashboard_fleet"


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
            say("the last load of this database did not finish: loading it again")
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
        say(f"reusing the fleet loaded {info.loaded_at} ({info.events:,} events, "
             f"{info.jobs:,} jobs); --rebuild loads it again")
        if _migrate():
            say("migrations were pending: refreshing every job's rollups with them…")
            jobs = list(JobRollup.objects.values_list("job", flat=True))
            refresh_imported(jobs, progress=Progress("refreshed", len(jobs)))
        return info
    _write_marker(size, None)
    _migrate()
    info = load_fleet(size)
    _write_marker(size, info)
    return info
