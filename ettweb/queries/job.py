"""One job's page: its headline numbers (the rollup row) and its attribution (the timeline)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ettweb.attribution.engine import JobAttribution, attribute_job
from ettweb.ingest.models import Event, Job, QuarantinedEvent
from ettweb.queries.base import by_component, phase_components, quarantined_lines
from ettweb.rollups.logic import load_events, refresh_jobs
from ettweb.rollups.models import JobRollup

# --------------------------------------------------------------------------- one job

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
    """One job's numbers; ``components`` overrides the edited phase→component map."""

    job: str
    components: Mapping[str, str] | None = None


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    status: str
    gpus: int
    duration_s: float


@dataclass(frozen=True)
class RecoveryRow:
    attempt: int
    seconds: float
    by_category: dict[str, float]


@dataclass(frozen=True)
class JobHeadline:
    """The numbers a job page shows: exactly the job's rollup row."""

    ett_pct: float
    wall_s: float
    productive_s: float
    wall_gpu_s: float
    productive_gpu_s: float
    time_to_start_s: float | None
    time_to_recover_s: list[float]
    failures: int
    repeated_steps: int
    attempts: list[AttemptRow]
    anomalies: dict[str, int]
    recoveries: list[RecoveryRow]

    @property
    def anomaly_count(self) -> int:
        return sum(self.anomalies.values())


@dataclass(frozen=True)
class JobResult:
    """A job's headline (from rollups), its attribution (for the timeline) and context."""

    job: str
    headline: JobHeadline
    attribution: JobAttribution
    lost_by_component_s: dict[str, float]
    quarantined: int
    meta: JobMeta


def _headline(rollup: JobRollup) -> JobHeadline:
    recoveries = [RecoveryRow(r.attempt, r.seconds, r.by_category)
                  for r in rollup.recovery_rows.order_by("attempt")]
    attempts = [AttemptRow(a.attempt, a.status, a.gpus, a.end - a.start)
                for a in rollup.attempt_rows.order_by("attempt")]
    return JobHeadline(
        ett_pct=rollup.ett_pct, wall_s=rollup.wall_s, productive_s=rollup.productive_s,
        wall_gpu_s=rollup.wall_gpu_s, productive_gpu_s=rollup.productive_gpu_s,
        time_to_start_s=rollup.time_to_start_s,
        time_to_recover_s=[r.seconds for r in recoveries], failures=rollup.failures,
        repeated_steps=rollup.repeated_steps, attempts=attempts,
        anomalies={k: int(v) for k, v in rollup.anomalies.items() if v},
        recoveries=recoveries,
    )


def _rollup(job: str) -> JobRollup | None:
    """The job's rollup; a job whose events predate rollups is refreshed on first view."""
    rollup = JobRollup.objects.filter(job=job).first()
    if rollup is None and Event.objects.filter(job=job).exists():
        refresh_jobs([job])
        rollup = JobRollup.objects.filter(job=job).first()
    return rollup


class JobQueryRunner:
    """Runs a :class:`JobQuery`; ``calculate()`` is ``None`` for a job with no stored events."""

    def __init__(self, query: JobQuery) -> None:
        self.query = query

    def calculate(self) -> JobResult | None:
        rollup = _rollup(self.query.job)
        events = load_events([self.query.job]).get(self.query.job, [])
        if rollup is None or not events:
            return None
        mapping = self.query.components or phase_components()
        return JobResult(
            job=self.query.job, headline=_headline(rollup), attribution=attribute_job(events),
            lost_by_component_s=by_component(rollup.lost_s, mapping),
            quarantined=quarantined_lines(QuarantinedEvent.objects.filter(job=self.query.job)),
            meta=_job_meta(self.query.job, rollup),
        )


def _job_meta(job: str, rollup: JobRollup) -> JobMeta:
    row = Job.objects.filter(job_id=job).values("model", "team", "cluster").first()
    if row:
        return JobMeta(**row)
    return JobMeta(model=rollup.model, team=rollup.team, cluster=rollup.cluster)


