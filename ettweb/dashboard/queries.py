"""Query runners: typed input → ``calculate()`` → typed result (PostHog-style).

Views never touch models or the engine directly; they run a query and render its result.
This skeleton loads a job's events and runs the attribution engine on every request — the
numbers are exactly the offline report's. Rollups (per-day tables) replace the event scan in
a later issue without changing these result types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ettweb.attribution.engine import FleetAttribution, JobAttribution, attribute, attribute_job
from ettweb.ingest.models import Event, Job, QuarantinedEvent

HOUR_S = 3600.0


def _events(job: str | None = None) -> Iterator[dict[str, Any]]:
    """Schema-v1 dicts of stored events (one job, or all), in a stable order."""
    rows = Event.objects.all() if job is None else Event.objects.filter(job=job)
    for event in rows.order_by("job", "id").iterator(chunk_size=2000):
        yield event.as_schema()


@dataclass(frozen=True)
class JobMeta:
    """What ingestion learnt about a job from its ``attempt_start`` attrs."""

    model: str = ""
    team: str = ""
    cluster: str = ""

    @property
    def summary(self) -> str:
        """``model dlrm · team ads`` — only the parts that are known."""
        parts = (("model", self.model), ("team", self.team), ("cluster", self.cluster))
        return " · ".join(f"{label} {value}" for label, value in parts if value)


@dataclass(frozen=True)
class JobQuery:
    """One job's numbers; ``components`` overrides the default phase→component map."""

    job: str
    components: Mapping[str, str] | None = None


@dataclass(frozen=True)
class JobResult:
    """A job's attribution plus what the page shows beside it."""

    job: str
    attribution: JobAttribution
    lost_by_component_s: dict[str, float]
    quarantined: int
    meta: JobMeta


class JobQueryRunner:
    """Runs a :class:`JobQuery`; ``calculate()`` is ``None`` for a job with no stored events."""

    def __init__(self, query: JobQuery) -> None:
        self.query = query

    def calculate(self) -> JobResult | None:
        events = list(_events(self.query.job))
        if not events:
            return None
        attribution = attribute_job(events)
        return JobResult(
            job=self.query.job,
            attribution=attribution,
            lost_by_component_s=attribution.lost_by_component_s(self.query.components),
            quarantined=QuarantinedEvent.objects.filter(job=self.query.job).count(),
            meta=_job_meta(self.query.job),
        )


def _job_meta(job: str) -> JobMeta:
    row = Job.objects.filter(job_id=job).values("model", "team", "cluster").first()
    return JobMeta(**row) if row else JobMeta()


@dataclass(frozen=True)
class FleetQuery:
    """Every job with stored events; ``components`` overrides the default map."""

    components: Mapping[str, str] | None = None


@dataclass(frozen=True)
class JobRow:
    """One line of the jobs table."""

    job: str
    attempts: int
    status: str
    gpus: int
    wall_s: float
    ett_pct: float
    lost_gpu_hours: float
    lost_by_component_s: dict[str, float]


@dataclass(frozen=True)
class FleetResult:
    """The jobs table and the fleet's GPU-weighted ETT% (ETT_SPEC §1)."""

    rows: list[JobRow]
    wall_gpu_s: float
    productive_gpu_s: float
    ett_pct: float
    quarantined: int
    components: list[str] = field(default_factory=list)

    @property
    def wall_gpu_hours(self) -> float:
        return self.wall_gpu_s / HOUR_S

    @property
    def lost_gpu_hours(self) -> float:
        return (self.wall_gpu_s - self.productive_gpu_s) / HOUR_S


class FleetQueryRunner:
    """Runs a :class:`FleetQuery` over all stored events."""

    def __init__(self, query: FleetQuery) -> None:
        self.query = query

    def calculate(self) -> FleetResult:
        fleet = _attribute_fleet()
        rows = [_row(job, self.query.components) for job in fleet.jobs]
        components = sorted({name for row in rows for name in row.lost_by_component_s})
        return FleetResult(
            rows=rows, wall_gpu_s=fleet.wall_gpu_s, productive_gpu_s=fleet.productive_gpu_s,
            ett_pct=fleet.ett_pct, quarantined=QuarantinedEvent.objects.count(),
            components=components,
        )


def _attribute_fleet() -> FleetAttribution:
    """Attribute job by job so one job's events are in memory at a time, not the fleet's."""
    jobs = [attribute_job(list(group)) for _, group in groupby(_events(), key=lambda e: e["job"])]
    return FleetAttribution(jobs=jobs) if jobs else attribute([])


def _row(job: JobAttribution, components: Mapping[str, str] | None) -> JobRow:
    last = job.attempts[-1] if job.attempts else None
    return JobRow(
        job=job.job,
        attempts=len(job.attempts),
        status=last.status if last else "",
        gpus=last.gpus if last else 0,
        wall_s=job.wall_s,
        ett_pct=job.ett_pct,
        lost_gpu_hours=sum(job.lost_gpu_s.values()) / HOUR_S,
        lost_by_component_s={k: v for k, v in job.lost_by_component_s(components).items() if v},
    )
