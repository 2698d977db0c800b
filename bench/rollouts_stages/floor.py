"""What Postgres alone needs to take an import's data: the floor an import is measured against.

Why: an events/s figure is a timer, and the machines this runs on differ by more than twice
in speed from one day to the next. The floor is measured in the same run, on the same
machine: the rows an import left behind (the events and their ids, the jobs, every rollup
table) are copied out, untimed, and COPYed back, timed, into empty tables with the same
columns, indexes, checks and foreign keys (schema ``ett_floor``, dropped after), on two
connections as the import has two processes. No parsing, no validation, no reading back,
no attribution, binary COPY: no import of the same data into the same tables can take less.
``import_s / floor_s`` says how far an import is from it on any machine, and the floor
itself says what a target in events/s can ask of these tables at all.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

#: The schema the floor's tables are made in (dropped after each measurement).
SCHEMA = "ett_floor"

#: What an import writes and keeps, parents first: the events (one partitioned table, a
#: plain one with the same indexes here), their ids, the jobs, and every rollup table.
IMPORTED_TABLES: tuple[str, ...] = (
    "ingest_event", "ingest_eventid", "ingest_job", "rollups_jobrollup",
    "rollups_attemptrollup", "rollups_attempttimeline", "rollups_attributionchunk",
    "rollups_dailycategoryrollup", "rollups_fleetdayrollup", "rollups_jobdayrollup",
    "rollups_joblostrollup", "rollups_labeldayrollup", "rollups_recoverypartrollup",
    "rollups_recoveryrollup", "rollups_scopetotalrollup",
)

#: Tables other floor tables' foreign keys point at: loaded, alone, before the rest.
PARENTS: tuple[str, ...] = ("rollups_jobrollup",)


@dataclass(frozen=True)
class Floor:
    """One floor measurement: wall seconds of the timed loads, the machine's CPU seconds over
    them (``None`` without ``/proc/stat``), and the rows and bytes loaded."""

    seconds: float
    cpu_s: float | None
    rows: int
    megabytes: float

    def as_dict(self) -> dict[str, Any]:
        return {"floor_s": round(self.seconds, 2),
                "floor_cpu_s": None if self.cpu_s is None else round(self.cpu_s, 2),
                "floor_rows": self.rows, "floor_mb": round(self.megabytes, 1)}


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has been busy since boot (every core, every process:
    Postgres's backends are not ours to time): user, nice, system, irq and softirq; idle,
    I/O wait and the time the hypervisor gave to others (steal) are not ours. ``None``
    where ``/proc/stat`` is missing."""
    try:
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq = (
                int(x) for x in stat.readline().split()[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def measure(url: str, tables: Sequence[str] = IMPORTED_TABLES,
            parents: Sequence[str] = PARENTS, loaders: int = 2) -> Floor:
    """Copy ``tables`` out of the database at ``url``, then time loading them into empty
    copies on ``loaders`` connections (``parents`` first, alone); the floor schema is
    dropped whatever happens. ``rows`` counts what the copies hold after the load."""
    with psycopg.connect(url, autocommit=True) as conn:
        data = {table: _copy_out(conn, table) for table in tables}
        rows = {table: _count(conn, table) for table in tables}
        try:
            _make_schema(conn, tables)
            busy = machine_busy_s()
            began = time.perf_counter()
            _load(url, {t: data[t] for t in parents if t in data}, 1)
            _load(url, {t: data[t] for t in tables if t not in parents}, loaders)
            seconds = time.perf_counter() - began
            after = machine_busy_s()
            loaded = {table: _count(conn, table, SCHEMA) for table in tables}
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(SCHEMA)))
    if loaded != rows:
        raise RuntimeError(f"the floor's tables hold other rows than the import's: {loaded} "
                           f"against {rows}")
    return Floor(seconds=seconds,
                 cpu_s=None if busy is None or after is None else after - busy,
                 rows=sum(loaded.values()),
                 megabytes=sum(len(chunk) for blob in data.values() for chunk in blob) / 2**20)


def _copy_out(conn: psycopg.Connection[Any], table: str) -> list[bytes]:
    query = sql.SQL("COPY (SELECT * FROM {}) TO STDOUT (FORMAT binary)").format(
        sql.Identifier(table))
    with conn.cursor() as cursor, cursor.copy(query) as copy:
        return [bytes(block) for block in copy]


def _count(conn: psycopg.Connection[Any], table: str, schema: str = "public") -> int:
    found = conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table))).fetchone()
    return int(found[0]) if found else 0


def _make_schema(conn: psycopg.Connection[Any], tables: Sequence[str]) -> None:
    """Empty tables LIKE the imported ones (columns, defaults, indexes, checks), plus the
    foreign keys among them, pointed at the floor's own tables."""
    floor = sql.Identifier(SCHEMA)
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(floor))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(floor))
    for table in tables:
        conn.execute(sql.SQL("CREATE TABLE {}.{} (LIKE public.{} INCLUDING ALL)").format(
            floor, sql.Identifier(table), sql.Identifier(table)))
    keys = conn.execute(
        "SELECT conrelid::regclass::text, conname, confrelid::regclass::text, "
        "pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' "
        "AND connamespace = 'public'::regnamespace").fetchall()
    for child, name, parent, definition in keys:
        child, parent = child.removeprefix("public."), parent.removeprefix("public.")
        if child in tables and parent in tables:
            moved = re.sub(rf"REFERENCES (public\.)?{re.escape(parent)}\(",
                           f"REFERENCES {SCHEMA}.{parent}(", definition)
            conn.execute(sql.SQL("ALTER TABLE {}.{} ADD CONSTRAINT {} ").format(
                floor, sql.Identifier(child), sql.Identifier(name)) + sql.SQL(moved))


def _load(url: str, data: dict[str, list[bytes]], loaders: int) -> None:
    """COPY each table's blocks in, the tables dealt to ``loaders`` connections by size
    (largest first to the least loaded), one thread each."""
    shares: list[list[str]] = [[] for _ in range(max(1, loaders))]
    sizes = [0] * len(shares)
    for table in sorted(data, key=lambda t: -sum(map(len, data[t]))):
        least = sizes.index(min(sizes))
        shares[least].append(table)
        sizes[least] += sum(map(len, data[table]))
    failures: list[BaseException] = []

    def load(share: list[str]) -> None:
        try:
            with psycopg.connect(url) as conn:
                for table in share:
                    query = sql.SQL("COPY {}.{} FROM STDIN (FORMAT binary)").format(
                        sql.Identifier(SCHEMA), sql.Identifier(table))
                    with conn.cursor() as cursor, cursor.copy(query) as copy:
                        for block in data[table]:
                            copy.write(block)
                    conn.commit()
        except BaseException as exc:  # raised again on the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=load, args=(share,)) for share in shares if share]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
