"""The job rows ingestion keeps beside the events: created when first seen, moved along by
every batch (latest event time, the home times their events span, model/team/cluster).

One upsert per batch, in the batch's transaction (``ettweb.ingest.batches``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

from django.db import connection

from ettweb.ingest.models import Job

JOB_META_KEYS: Final = ("model", "team", "cluster")
#: Per job: latest event time, first and last home time, the longest span, and
#: model/team/cluster from its ``attempt_start`` attrs.
JobUpdate = tuple[float, float, float, float, dict[str, str]]


def job_updates(events: Iterable[dict[str, Any]]) -> dict[str, JobUpdate]:
    """What a batch tells each of its jobs (see :data:`JobUpdate`)."""
    jobs: dict[str, JobUpdate] = {}
    inf = math.inf
    for event in events:
        span = event["kind"] == "span"
        home, at = (event["start"], event["end"]) if span else (event["ts"], event["ts"])
        latest, first, last, longest, meta = jobs.get(event["job"], (-inf, inf, -inf, 0.0, {}))
        if not span and event["mark"] == "attempt_start":
            meta = meta | {key: str(event["attrs"][key])[:200]
                           for key in JOB_META_KEYS if event["attrs"].get(key) is not None}
        jobs[event["job"]] = (max(latest, at), min(first, home), max(last, home),
                              max(longest, at - home), meta)
    return jobs


def _upsert_jobs_sql() -> str:
    """One statement for every job of a batch (was two per job): insert unseen jobs, move
    ``last_event_time`` forward only, widen the home times to the batch's, and take
    model/team/cluster where the batch gave them.

    ``ON CONFLICT DO UPDATE`` (not a separate UPDATE) because it also updates a row another
    worker committed after this statement's snapshot; rows are taken in job order, so two
    batches never deadlock. A NULL in ``v`` means "not given": the stored value stays. A
    job whose home times (longest span) are NULL was stored before they were kept
    (migrations 0009, 0012): they stay unknown, so a reader never takes them for the whole
    job's.
    """
    table = Job._meta.db_table
    given = ", ".join(f"{key} = CASE WHEN (SELECT v.{key} FROM v WHERE v.job = EXCLUDED.job_id) "
                      f"IS NULL THEN {table}.{key} ELSE EXCLUDED.{key} END"
                      for key in JOB_META_KEYS)
    homes = ", ".join(
        f"{column} = CASE WHEN {table}.{column} IS NULL THEN NULL "
        f"ELSE {pick}({table}.{column}, EXCLUDED.{column}) END"
        for column, pick in (("first_home", "least"), ("last_home", "greatest"),
                             ("longest_span_s", "greatest")))
    return (
        "WITH v (job, latest, first_home, last_home, longest_span_s, model, team, cluster) AS "
        "(SELECT * FROM unnest(%s::text[], %s::float8[], %s::float8[], %s::float8[], "
        "%s::float8[], %s::text[], %s::text[], %s::text[])) "
        f"INSERT INTO {table} (job_id, first_seen, last_event_time, first_home, last_home, "
        "longest_span_s, model, team, cluster) "
        "SELECT job, now(), latest, first_home, last_home, longest_span_s, coalesce(model, ''), "
        "coalesce(team, ''), coalesce(cluster, '') FROM v ORDER BY job "
        f"ON CONFLICT (job_id) DO UPDATE SET last_event_time = "
        f"greatest({table}.last_event_time, EXCLUDED.last_event_time), {homes}, {given}")


def update_jobs(events: Iterable[dict[str, Any]]) -> None:
    """Create unseen jobs, move their last event time forward (never backward) and widen
    their home times to cover the batch."""
    updates = sorted(job_updates(events).items())
    if not updates:
        return
    columns: list[Any] = [[job for job, _ in updates],
                          *([update[i] for _, update in updates] for i in range(4)),
                          *([update[4].get(key) for _, update in updates]
                            for key in JOB_META_KEYS)]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_jobs_sql(), columns)
