"""The raw path: a request's numbers computed from raw events, for the ratio to stored time.

Why: the rollups exist so pages need not attribute events on every request; the ratio of
this path's time to the stored request's server time says what they save, page by page. For
one representative request per page (the last 30 data days where it takes a range, the job
with the most events, a mid-period rollout with its default window, the last complete week
with its 8-week history) the jobs the request covers are found in the events table, their
events loaded as ``ettweb.rollups.refresh.load_events`` does (200 jobs at a time), attributed
by ``attribute_job`` and split per day over the range. Each distinct scope is computed once
and shared by the pages covering it; pages that read no event-derived numbers (the
collectors, forms, the rollout list) say so instead. The same ETT% read from the rollups is
reported beside it: both paths must give the same numbers.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from bench.dashboard_stages.catalog import Catalog
from bench.dashboard_stages.discovery import Target

RAW_CHUNK_JOBS: Final = 200
#: Pages and endpoints whose answer holds no number derived from events: no raw path.
NO_EVENT_NUMBERS: Final = frozenset({
    "dashboard:collectors", "rollouts:list", "rollouts:create", "rollouts:edit",
    "components:phases",
    "reports:settings", "reports:unsubscribe", "healthz", "favicon",
    "api-v1:openapi-json", "api-v1:openapi-view",
    "GET /api/v1/rollouts", "GET /api/v1/rollouts/{rollout_id}", "GET /api/v1/collectors"})


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
