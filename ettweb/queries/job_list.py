"""The jobs list at fleet scale: filtered, sorted and paginated in Postgres, one page at a time.

Why not every job at once: a fleet has tens of thousands of jobs; loading each rollup to draw
a row (and a bar) per job made ``/`` slow and unreadable. A page asks for one page of rows
(sorted by an indexed or computed column), the count, the filtered set's totals (its
GPU-weighted ETT% and lost time per component, summed in SQL from the per-job rollups) and
the values the filters can take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

from django.db.models import Count, F, Q, QuerySet, Sum

from ettweb.attribution.components import component_of
from ettweb.ingest.models import QuarantinedEvent
from ettweb.platform.text import unstorable
from ettweb.queries import liveness
from ettweb.queries.base import (
    GPU_BUCKETS,
    HOUR_S,
    LABELS,
    MAX_LABEL_CHARS,
    DateRange,
    aggregating,
    pct,
    phase_components,
    quarantined_lines,
    validated,
)
from ettweb.queries.choices import FilterChoicesQuery, FilterChoicesQueryRunner
from ettweb.queries.exposed import as_api, doc, hidden
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.models import JobLostRollup, JobRollup

#: Sort keys (a leading ``-`` sorts descending) and the column each orders by.
SORTS: Final[dict[str, str]] = {
    "job": "job", "ett_pct": "ett_pct", "lost_gpu_hours": "lost", "failures": "failures",
    "gpus": "gpus", "start": "window_start", "attempts": "attempts", "wall": "wall_s"}
#: ``stale`` keeps the running jobs not heard from for ``ETT_STALE_AFTER_S``
#: (``ettweb.queries.liveness``); ``running`` keeps every running job, stale or not.
STATUSES: Final = ("running", "stale", "completed", "failed", "preempted", "lost", "cancelled")
MAX_PAGE_SIZE: Final = 200
#: Longest search text (``q``) the jobs page and ``/api/v1/jobs`` take: a job's name is
#: stored in 200 characters, so a longer text matches nothing; one limit for both, so the
#: API never takes what the page refuses (issue 40, item 4e).
MAX_SEARCH_CHARS: Final = 200


@dataclass(frozen=True)
class JobsQuery(Query["JobsResult"]):
    """One page of jobs matching the filters; ``range`` keeps jobs whose window overlaps it.
    ``now`` is the moment staleness is judged at (default: the clock's)."""

    range: DateRange | None = None
    search: str = ""
    model: str = ""
    team: str = ""
    cluster: str = ""
    gpus: str = ""  # a GPU-size bucket label
    status: str = ""
    sort: str = "-lost_gpu_hours"
    page: int = 1
    page_size: int = 50
    now: datetime | None = None

    def __post_init__(self) -> None:
        for name, value, limit in (("q", self.search, MAX_SEARCH_CHARS),
                                   ("model", self.model, MAX_LABEL_CHARS),
                                   ("team", self.team, MAX_LABEL_CHARS),
                                   ("cluster", self.cluster, MAX_LABEL_CHARS)):
            if len(value) > limit:
                raise ValueError(f"{name} must be at most {limit} characters, not {len(value)}")
            problem = unstorable(value)  # Postgres refuses a NUL: a 400, not a 500
            if problem:
                raise ValueError(f"{name} {problem}")
        validated("sort", self.sort.removeprefix("-"), tuple(SORTS))
        if self.gpus:
            validated("gpus", self.gpus, tuple(label for _, _, label in GPU_BUCKETS))
        if self.status:
            validated("status", self.status, STATUSES)
        if self.page < 1:
            raise ValueError(f"page must be 1 or more, not {self.page}")
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, "
                             f"not {self.page_size}")

    def scope_api(self) -> dict[str, Any]:
        """The range and filters this query applies, as the API repeats them: a client
        sees what it was answered (a range of None means every job, whenever it ran)."""
        days = self.range
        return {"date_from": days.date_from.isoformat() if days else None,
                "date_to": days.date_to.isoformat() if days else None,
                "filter": as_api(JobsFilter(self.search, self.model, self.team, self.cluster,
                                            self.gpus, self.status)),
                "sort": self.sort, "page_size": self.page_size}


@dataclass(frozen=True)
class JobsFilter:
    """The jobs list's filters as the API repeats them (``q``: the search text)."""

    q: str
    model: str
    team: str
    cluster: str
    gpus: str
    status: str


@dataclass(frozen=True)
class JobListRow:
    """One job as the list shows it: its labels, its last attempt's status and GPUs, its
    window's start, and its ETT%, lost time, failures and anomalies over its whole life."""

    job: str
    model: str
    team: str
    cluster: str
    attempts: int
    status: str
    gpus: int
    start: datetime | None
    wall_s: float
    ett_pct: float
    lost_gpu_hours: float
    failures: int
    anomalies: int
    last_heard: datetime | None = field(default=None, metadata=doc(
        "the job's latest event time (UTC); null when unknown"))
    stale: bool = field(default=False, metadata=doc(
        "running, but nothing heard from it for stale_after_s: its process is probably "
        "gone without an end (status stays running, its numbers do not change)"))

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@dataclass(frozen=True)
class JobsResult:
    """One page of jobs, the filtered set's count and totals, and what the page's filters
    can take."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("ett_pct",)
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "total", "page", "pages", "wall_gpu_s", "productive_gpu_s", "ett_pct", "failures",
        "lost_by_component_gpu_s", "jobs", "stale_jobs", "stale_after_s")

    jobs: tuple[JobListRow, ...]
    total: int
    page: int
    pages: int
    wall_gpu_s: float
    productive_gpu_s: float
    failures: int
    lost_by_component_gpu_s: dict[str, float]
    #: The page's notes and its filters' values: not what a script paging through asks.
    quarantined: int = field(metadata=hidden())
    choices: dict[str, tuple[str, ...]] = field(metadata=hidden())
    stale_jobs: int = field(metadata=doc(
        "jobs of the filtered set that are stale (running, nothing heard for stale_after_s)"))
    stale_after_s: float = field(metadata=doc(
        "seconds without an event after which a running job is stale (ETT_STALE_AFTER_S)"))
    #: The moment staleness was judged at (the page's "last heard … ago" counts from it).
    judged_at: datetime | None = field(default=None, metadata=hidden())

    @property
    def ett_pct(self) -> float:
        return pct(self.productive_gpu_s, self.wall_gpu_s)

    @property
    def lost_gpu_hours(self) -> float:
        return (self.wall_gpu_s - self.productive_gpu_s) / HOUR_S

    @property
    def wall_gpu_hours(self) -> float:
        return self.wall_gpu_s / HOUR_S

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(JobsQuery)
class JobsQueryRunner:
    def __init__(self, query: JobsQuery) -> None:
        self.query = query

    def export(self, limit: int = 100_000) -> list[JobListRow]:
        """Every matching job in the query's order (the CSV export), at most ``limit``."""
        at = liveness.judged_at(self.query.now)
        return [_row(r, at) for r in self._ordered(at)[:limit]]

    def _ordered(self, at: datetime) -> QuerySet[JobRollup]:
        q = self.query
        key = SORTS[q.sort.removeprefix("-")]
        order = (F(key).desc(nulls_last=True) if q.sort.startswith("-")
                 else F(key).asc(nulls_last=True))
        return (self._filtered(at).annotate(lost=F("wall_gpu_s") - F("productive_gpu_s"),
                                            heard=liveness.last_heard_sql())
                .order_by(order, "job"))

    def calculate(self) -> JobsResult:
        q = self.query
        at = liveness.judged_at(q.now)
        matching = self._filtered(at)
        totals = matching.aggregate(n=Count("id"), wall=Sum("wall_gpu_s"),
                                    productive=Sum("productive_gpu_s"),
                                    failures=Sum("failures"))
        total = int(totals["n"])
        pages = max(1, -(-total // q.page_size))
        page = min(q.page, pages)
        rows = self._ordered(at)[(page - 1) * q.page_size:page * q.page_size]
        return JobsResult(
            jobs=tuple(_row(r, at) for r in rows), total=total, page=page, pages=pages,
            wall_gpu_s=float(totals["wall"] or 0.0),
            productive_gpu_s=float(totals["productive"] or 0.0),
            failures=int(totals["failures"] or 0),
            lost_by_component_gpu_s=_lost_by_component(matching, phase_components(),
                                                        filtered=bool(matching.query.has_filters())),
            quarantined=quarantined_lines(QuarantinedEvent.objects.all()),
            choices=_choices(), stale_jobs=_stale(matching, at).count(),
            stale_after_s=liveness.stale_after_s(), judged_at=at)

    def _filtered(self, at: datetime) -> QuerySet[JobRollup]:
        q = self.query
        rows = JobRollup.objects.all()
        for name in ("model", "team", "cluster"):
            if getattr(q, name):
                rows = rows.filter(**{name: getattr(q, name)})
        if q.status == "stale":
            rows = _stale(rows, at)
        elif q.status:
            rows = rows.filter(status=q.status)
        if q.search:
            rows = rows.filter(job__icontains=q.search)
        if q.gpus:
            low, high = next((lo, hi) for lo, hi, label in GPU_BUCKETS if label == q.gpus)
            rows = rows.filter(gpus__gte=low, **({"gpus__lte": high} if high else {}))
        if q.range is not None:
            start, end = q.range.epoch_bounds
            rows = rows.filter(Q(window_start__lt=end) & Q(window_end__gte=start))
        return rows


def _stale(rows: QuerySet[JobRollup], at: datetime) -> QuerySet[JobRollup]:
    """The running jobs of ``rows`` last heard before the stale cutoff at ``at``."""
    return (rows.filter(status=liveness.RUNNING).alias(heard_at=liveness.last_heard_sql())
            .filter(heard_at__lt=liveness.stale_before(at)))


def _row(rollup: Any, at: datetime) -> JobListRow:
    start = (datetime.fromtimestamp(rollup.window_start, UTC)
             if rollup.window_start is not None else None)
    return JobListRow(job=rollup.job, model=rollup.model, team=rollup.team,
                      cluster=rollup.cluster, attempts=rollup.attempts, status=rollup.status,
                      gpus=rollup.gpus, start=start, wall_s=rollup.wall_s,
                      ett_pct=rollup.ett_pct, lost_gpu_hours=rollup.lost / HOUR_S,
                      failures=rollup.failures, anomalies=rollup.anomaly_count,
                      last_heard=liveness.as_time(rollup.heard),
                      stale=liveness.is_stale(rollup.status, rollup.heard, at))


def _lost_by_component(rows: QuerySet[JobRollup], mapping: Mapping[str, str],
                       filtered: bool) -> dict[str, float]:
    """The filtered jobs' lost GPU-seconds per component, summed in Postgres from their
    :class:`JobLostRollup` rows (the same numbers as each rollup's ``lost_gpu_s``)."""
    table = JobLostRollup._meta.db_table
    with aggregating() as cursor:
        if filtered:
            inner, params = rows.values("job").query.sql_with_params()
            cursor.execute(f"SELECT l.category, SUM(l.gpu_seconds) FROM {table} l "
                           f"JOIN ({inner}) AS j ON j.job = l.job GROUP BY l.category", params)
        else:  # every job: no join at all
            cursor.execute(f"SELECT category, SUM(gpu_seconds) FROM {table} GROUP BY category")
        by_category = cursor.fetchall()
    folded: dict[str, float] = {}
    for category, gpu_s in sorted(by_category):
        component = component_of(category, mapping)
        folded[component] = folded.get(component, 0.0) + float(gpu_s or 0.0)
    return {c: s for c, s in sorted(folded.items(), key=lambda kv: -kv[1]) if s}


def _choices() -> dict[str, tuple[str, ...]]:
    """The values each text filter can take: the fleet pages' own filter choices."""
    found = FilterChoicesQueryRunner(FilterChoicesQuery()).calculate()
    return {name: getattr(found, name) for name in LABELS}
