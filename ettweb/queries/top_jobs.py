"""The jobs that lost the most GPU-hours inside a range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from django.db.models import F, Sum

from ettweb.queries.base import (
    ANY_JOB,
    HOUR_S,
    DateRange,
    JobFilter,
    aggregating,
    pct,
)
from ettweb.queries.exposed import as_api
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.models import (
    JobDayRollup,
    JobRollup,
)


@dataclass(frozen=True)
class TopJobsQuery(Query["TopJobsResult"]):
    """Jobs that lost the most GPU-hours inside the range."""

    range: DateRange
    limit: int = 10
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= 1000:
            raise ValueError(f"limit must be between 1 and 1000, not {self.limit}")


@dataclass(frozen=True)
class JobLoss:
    """A job and the GPU-seconds it lost inside a range, of its wall GPU-seconds there: how
    the weekly report and the fleet summary list the jobs that lost most."""

    job: str
    lost_gpu_s: float
    wall_gpu_s: float


@dataclass(frozen=True)
class TopJob(JobLoss):
    """A job that lost the most inside a range, with its labels and ETT% there, as the
    fleet page lists it."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("ett_pct",)

    gpus: int
    status: str
    model: str
    team: str
    cluster: str

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_s / HOUR_S

    @property
    def ett_pct(self) -> float:
        """ETT% of the job inside the range (not over its whole life)."""
        return pct(self.wall_gpu_s - self.lost_gpu_s, self.wall_gpu_s)

    @property
    def loss(self) -> JobLoss:
        """The job as a report lists it: what it lost, without its labels."""
        return JobLoss(self.job, self.lost_gpu_s, self.wall_gpu_s)


@dataclass(frozen=True)
class TopJobsResult:
    jobs: list[TopJob]

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(TopJobsQuery)
class TopJobsQueryRunner:
    def __init__(self, query: TopJobsQuery) -> None:
        self.query = query

    def calculate(self) -> TopJobsResult:
        q = self.query
        job_days = q.jobs.narrow(JobDayRollup.objects.filter(day__gte=q.range.date_from,
                                                             day__lte=q.range.date_to))
        with aggregating():
            rows = list(job_days.values("job_id")
                        .annotate(wall=Sum("wall_gpu_seconds"),
                                  productive=Sum("productive_gpu_seconds"))
                        .annotate(lost=F("wall") - F("productive"))
                        .filter(lost__gt=0).order_by("-lost", "job_id")[:q.limit])
        meta = {r.job: r for r in JobRollup.objects.filter(job__in=[x["job_id"] for x in rows])}
        jobs = [TopJob(job=row["job_id"], lost_gpu_s=row["lost"], wall_gpu_s=row["wall"],
                       gpus=meta[row["job_id"]].gpus, status=meta[row["job_id"]].status,
                       model=meta[row["job_id"]].model, team=meta[row["job_id"]].team,
                       cluster=meta[row["job_id"]].cluster)
                for row in rows]
        return TopJobsResult(jobs)
