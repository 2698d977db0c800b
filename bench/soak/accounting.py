"""The end of a soak: exact books per event id, and rollups against a from-scratch recompute.

Why per id and not per total: totals can balance by accident (a lost event and a duplicate
cancel out). Every id a Reporter handed out (and every id of a replayed backlog) must be
stored exactly once, or be one of the events its node counted: dropped by the Reporter
(``dropped_full + dropped_invalid`` minus the emits that returned no id) or corrupted in the
spool (the agent's committed ``corrupted`` total). Per node, the ids not stored must number
exactly dropped + corrupted: fewer is an event counted but stored anyway (``miscounted``),
more is an event gone without a trace (``lost``). Ids whose payload the chaos destroyed
must be among the missing ones; a stored id nobody emitted is ``unknown``.

Rollups: the stored tables are read, then ``rebuild_all()`` recomputes every job from the
stored events inside a transaction that is rolled back, and both readings must agree (to
1e-9 relative: a recompute may add floats in another order). Days of a replayed 3-day-old
backlog must have rows written after the backlog landed: late days were recomputed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.soak.chaos import Backlog, Damage
from bench.soak.rig import Node, read_state

REL_TOL = 1e-9
ABS_TOL = 1e-6


@dataclass
class NodeBooks:
    """What one node's trainers, backlogs and agent say happened."""

    node: int
    accepted: set[str] = field(default_factory=set)
    #: where each id came from: (trainer, position in its emit order), -1 for a backlog
    origin: dict[str, tuple[int, int]] = field(default_factory=dict)
    dropped: int = 0  # accepted ids the Reporters dropped (their counters)
    reporter_dropped: int = 0  # dropped_full + dropped_invalid (what the sidecars carry)
    none_returns: int = 0
    corrupted: int = 0  # the agent's committed count
    shipped_lines: int = 0
    trainers_ok: bool = True
    jobs: list[str] = field(default_factory=list)


def node_books(node: Node, backlogs: Iterable[Backlog]) -> NodeBooks:
    books = NodeBooks(node.index)
    for trainer in range(len(node.trainers)):
        try:
            manifest = json.loads(node.manifest(trainer).read_text())
            ids = node.ids_file(trainer).read_text().split()
        except (OSError, ValueError):
            books.trainers_ok = False  # a trainer that wrote no books: its ids are unknown
            continue
        books.accepted.update(ids)
        books.origin.update((event_id, (trainer, seq)) for seq, event_id in enumerate(ids))
        books.dropped += int(manifest["dropped_accepted"])
        books.reporter_dropped += int(manifest["dropped_full"]) + int(manifest["dropped_invalid"])
        books.none_returns += int(manifest["none_returns"])
        books.trainers_ok &= bool(manifest["shutdown_ok"]) and len(ids) == manifest["accepted"]
        books.jobs += manifest["jobs"]
    for backlog in backlogs:
        if backlog.node == node.index:
            books.accepted.update(backlog.ids)
            books.origin.update((event_id, (-1, seq)) for seq, event_id in enumerate(backlog.ids))
            books.jobs += backlog.jobs
    totals = read_state(node.spool).get("totals", {})
    books.corrupted = int(totals.get("corrupted", 0))
    books.shipped_lines = int(totals.get("lines", 0))
    return books


def expected_stored(books: Iterable[NodeBooks]) -> int:
    return sum(len(b.accepted) - b.dropped - b.corrupted for b in books)


def stored_counts() -> dict[str, int]:
    """Every stored event id and how many rows carry it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT event_id, count(*) FROM ingest_event GROUP BY event_id")
        return {str(event_id): int(count) for event_id, count in cursor.fetchall()}


def account(all_books: list[NodeBooks], damage: list[Damage],
            published: Iterable[str] = ()) -> tuple[dict[str, Any], set[str]]:
    """The per-id books (every figure the JSON line reports about events), and the ids
    neither stored nor accountable as a whole node's drops and corruption. ``published``:
    ids the soak sent to the broker itself (source_flood's), each of which must be stored."""
    from django.db import connection

    from ettweb.ingest.models import QuarantinedEvent
    from ettweb.queries.base import quarantined_lines

    stored = stored_counts()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_eventid")
        id_rows = int(cursor.fetchone()[0])
    emitted: set[str] = set()
    per_node: list[dict[str, Any]] = []
    lost = miscounted = overlap = 0
    unexplained: set[str] = set()
    for books in all_books:
        overlap += len(emitted & books.accepted)
        emitted |= books.accepted
        absent = [event_id for event_id in books.accepted if event_id not in stored]
        missing = len(absent)
        counted = books.dropped + books.corrupted
        lost += max(0, missing - counted)
        miscounted += max(0, counted - missing)
        entry: dict[str, Any] = {
            "node": books.node, "emitted": len(books.accepted),
            "stored": len(books.accepted) - missing, "dropped": books.dropped,
            "corrupted": books.corrupted, "missing": missing, "balanced": missing == counted}
        if missing > counted:  # where the unaccounted ones came from, to find them in logs
            unexplained.update(absent)  # drops among them cannot be told apart by id
            spans: dict[int, list[tuple[int, str]]] = {}
            for event_id in absent:
                trainer, seq = books.origin[event_id]
                spans.setdefault(trainer, []).append((seq, event_id))
            entry["missing_by_trainer"] = {
                str(t): {"count": len(seqs), "first_seq": min(seqs)[0],
                         "last_seq": max(seqs)[0], "sample": [i for _s, i in sorted(seqs)[:3]]}
                for t, seqs in sorted(spans.items())}
        per_node.append(entry)
    direct = set(published)
    direct_missing = [event_id for event_id in direct if event_id not in stored]
    lost += len(direct_missing)
    unexplained.update(direct_missing)
    overlap += len(emitted & direct)
    emitted |= direct
    targeted = {event_id for d in damage for event_id in d.ids}
    return {
        "events_emitted": len(emitted),
        "stored": sum(1 for event_id in stored if event_id in emitted),
        "stored_rows": sum(stored.values()),
        "event_id_rows": id_rows,
        "dropped": sum(b.dropped for b in all_books),
        "dropped_at_emit": sum(b.none_returns for b in all_books),
        "corrupted": sum(b.corrupted for b in all_books),
        "corrupted_targeted": len(targeted),
        "corrupted_targeted_stored": sum(1 for event_id in targeted if event_id in stored),
        "corrupted_structural_hits": sum(d.structural for d in damage),
        "lost": lost,
        "duplicated": sum(count - 1 for count in stored.values() if count > 1),
        "miscounted": miscounted,
        "unknown_stored": sum(1 for event_id in stored if event_id not in emitted),
        "ids_reused_across_nodes": overlap,
        "published_directly": len(direct), "published_directly_missing": len(direct_missing),
        "quarantined": quarantined_lines(QuarantinedEvent.objects.all()),
        "trainer_books_complete": all(b.trainers_ok for b in all_books),
        "per_node": per_node,
    }, unexplained


def health_check(nodes: list[Node], all_books: list[NodeBooks]) -> dict[str, Any]:
    """Whether each agent's last ``ett.collector_health`` report (stored by a worker)
    shows the same counts as the books: nothing in backlog, the drops the Reporters
    counted, the corruption the agent committed."""
    from ettweb.ingest.models import CollectorHealth

    rows = {row.source: row for row in CollectorHealth.objects.all()}
    problems: list[str] = []
    known: list[str] = []
    for node, books in zip(nodes, all_books, strict=True):
        row = rows.get(node.source)
        if row is None:
            problems.append(f"{node.source}: no health report stored")
            continue
        want = {"backlog_events": 0, "dropped_events": books.reporter_dropped,
                "corrupted_records": books.corrupted, "shipped_events": books.shipped_lines}
        wrong = [f"{node.source}: {name} {getattr(row, name)} != {value}"
                 for name, value in want.items() if getattr(row, name) != value]
        problems += wrong
        if not wrong:
            continue
        # Two causes are known (see the soak's report); anything else is new.
        if row.shipped_events < books.shipped_lines:
            known.append(f"{node.source}: stale report stored last (a redelivered older "
                         "ett.collector_health overwrote the final one)")
        elif (node.tmpfs and row.dropped_events < books.reporter_dropped
              and all("dropped_events" in w for w in wrong)):
            known.append(f"{node.source}: drops on a full disk never reached the sidecar")
        else:
            known.append("")
    return {"health_reports_agree": not problems, "health_problems": problems,
            "health_problems_known": bool(problems) and all(known),
            "health_problem_causes": [k for k in known if k]}


# --------------------------------------------------------------------------- rollups
def _snapshot() -> dict[str, dict[Any, Any]]:
    from ettweb.rollups.models import (
        AttemptRollup,
        DailyCategoryRollup,
        FleetDayRollup,
        JobDayRollup,
        JobLostRollup,
        JobRollup,
        LabelDayRollup,
        RecoveryPartRollup,
        RecoveryRollup,
        ScopeTotalRollup,
    )

    job_fields = [f.attname for f in JobRollup._meta.concrete_fields
                  if f.name not in ("id", "updated_at")]
    return {
        "jobs": {row["job"]: row for row in JobRollup.objects.values(*job_fields)},
        "attempts": {(r["job_id"], r["attempt"]): r for r in AttemptRollup.objects.values(
            "job_id", "attempt", "start", "end", "status", "gpus")},
        "recoveries": {(r["job_id"], r["attempt"]): r for r in RecoveryRollup.objects.values(
            "job_id", "attempt", "start", "end", "day", "seconds", "gpus", "by_category",
            "by_category_gpu")},
        "days": {(r["job_id"], r["day"], r["category"]): (r["seconds"], r["gpu_seconds"])
                 for r in DailyCategoryRollup.objects.values("job_id", "day", "category",
                                                             "seconds", "gpu_seconds")},
        "job_lost": {(job, category): gpu_s for job, category, gpu_s in
                     JobLostRollup.objects.values_list("job_id", "category", "gpu_seconds")},
        # The sums kept incrementally beside the rows: a recompute refills them from scratch.
        "fleet_days": {(r[0], r[1]): r[2:] for r in FleetDayRollup.objects.values_list(
            "day", "category", "seconds", "gpu_seconds")},
        "label_days": {r[:6]: r[6:] for r in LabelDayRollup.objects.values_list(
            "day", "category", "model", "team", "cluster", "gpus", "seconds", "gpu_seconds")},
        "scope_totals": {r[:3]: r[3:] for r in ScopeTotalRollup.objects.values_list(
            "team", "cluster", "category", "seconds", "gpu_seconds")},
        "job_days": {(r[0], r[1]): r[2:] for r in JobDayRollup.objects.values_list(
            "job_id", "day", "wall_gpu_seconds", "productive_gpu_seconds")},
        "recovery_parts": {r[:3]: r[3] for r in RecoveryPartRollup.objects.values_list(
            "job_id", "attempt", "category", "gpu_seconds")},
    }


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def compare_rollups(backlogs: list[Backlog]) -> dict[str, Any]:
    """Stored rollups vs a from-scratch recompute of every job (rolled back)."""
    from django.db import transaction

    from ettweb.rollups.models import DailyCategoryRollup, DirtyJob
    from ettweb.rollups.rebuild import rebuild_all

    stored = _snapshot()
    dirty = DirtyJob.objects.count()
    with transaction.atomic():
        rebuild_all()
        fresh = _snapshot()
        transaction.set_rollback(True)
    mismatches: list[str] = []
    for table, rows in stored.items():
        other = fresh[table]
        for key in sorted(rows.keys() | other.keys(), key=str):
            if key not in other or key not in rows or not _close(rows[key], other[key]):
                if len(mismatches) < 20:
                    mismatches.append(f"{table} {key}: stored {rows.get(key)!r} "
                                      f"recomputed {other.get(key)!r}")
                else:
                    break
    late_expected = late_fresh = 0
    stale: list[str] = []
    for backlog in backlogs:
        written = datetime.fromtimestamp(backlog.written, UTC)
        for job in backlog.jobs:
            days: dict[str, datetime] = {}
            for row_day, at in DailyCategoryRollup.objects.filter(job__job=job).values_list(
                    "day", "written_at"):
                iso = row_day.isoformat()
                days[iso] = min(at, days.get(iso, at))
            for day in backlog.job_days[job]:
                late_expected += 1
                if day in days and days[day] >= written:
                    late_fresh += 1
                elif len(stale) < 10:
                    stale.append(f"{job} {day}: " + (f"written {days[day].isoformat()} before "
                                 f"the backlog landed {written.isoformat()}" if day in days
                                 else f"no row (job has days {sorted(days)})"))
    return {
        "rollups_equal": not mismatches and dirty == 0,
        "rollup_jobs": len(stored["jobs"]),
        "rollup_day_rows": len(stored["days"]),
        "rollup_mismatches": mismatches,
        "dirty_jobs_left": dirty,
        "late_days": late_expected,
        "late_days_recomputed": late_fresh,
        "late_days_stale": stale,
    }


def read_log_evidence(logs: Path) -> dict[str, int]:
    """What the processes' own logs say happened: proof that the faults bit."""
    counts = {"agent_publish_failures": 0, "agent_corrupt_records_logged": 0,
              "worker_retries": 0, "worker_tracebacks": 0, "worker_unrecoverable": 0}
    for path in logs.glob("agent-*.log"):
        text = path.read_text(errors="replace")
        counts["agent_publish_failures"] += text.count("broker error")
        counts["agent_corrupt_records_logged"] += text.count("record skipped and counted")
    for path in logs.glob("worker-*.log"):
        text = path.read_text(errors="replace")
        counts["worker_retries"] += text.count("database away")
        counts["worker_tracebacks"] += text.count("Traceback (most recent call last)")
        counts["worker_unrecoverable"] += text.count("Unrecoverable error")
    return counts
