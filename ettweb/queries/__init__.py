"""The query layer: typed query → ``calculate()`` → dataclass (PostHog-style query runners).

Every number a person or a program sees comes through here — dashboard pages, the JSON API,
the e-mail reports and ``/metrics`` — so none of them can disagree. Each query is a frozen
dataclass that validates itself; its runner reads rollups (never raw events, except one job's
timeline) and returns a frozen result. Modules: ``base`` (ranges, the component map),
``fleet`` (trend, lost time, top jobs, lifecycle, jobs table), ``job`` (one job).
"""

from __future__ import annotations

from typing import Any, overload

from ettweb.queries.base import (
    ALL,
    GPU_BUCKETS,
    GROUPINGS,
    HOUR_S,
    INTERVALS,
    MAX_RANGE_DAYS,
    DateRange,
    Grouping,
    Interval,
    default_range,
    gpu_bucket,
    phase_components,
)
from ettweb.queries.fleet import (
    FleetQuery,
    FleetQueryRunner,
    FleetResult,
    JobRow,
    LifecycleQuery,
    LifecycleQueryRunner,
    LifecycleResult,
    LostByComponentQuery,
    LostByComponentQueryRunner,
    LostByComponentResult,
    TopJobsQuery,
    TopJobsQueryRunner,
    TopJobsResult,
    TrendQuery,
    TrendQueryRunner,
    TrendResult,
)
from ettweb.queries.job import JobMeta, JobQuery, JobQueryRunner, JobResult

__all__ = [
    "ALL", "GPU_BUCKETS", "GROUPINGS", "HOUR_S", "INTERVALS", "MAX_RANGE_DAYS", "DateRange",
    "FleetQuery", "FleetResult", "Grouping", "Interval", "JobMeta", "JobQuery",
    "JobQueryRunner", "JobResult", "JobRow", "LifecycleQuery", "LifecycleResult",
    "LostByComponentQuery", "LostByComponentResult", "TopJobsQuery", "TopJobsResult",
    "TrendQuery", "TrendResult", "calculate", "default_range", "gpu_bucket",
    "phase_components",
]

AnyQuery = (TrendQuery | LostByComponentQuery | TopJobsQuery | LifecycleQuery | FleetQuery
            | JobQuery)

_RUNNERS: dict[type, Any] = {
    TrendQuery: TrendQueryRunner, LostByComponentQuery: LostByComponentQueryRunner,
    TopJobsQuery: TopJobsQueryRunner, LifecycleQuery: LifecycleQueryRunner,
    FleetQuery: FleetQueryRunner, JobQuery: JobQueryRunner,
}


@overload
def calculate(query: TrendQuery) -> TrendResult: ...
@overload
def calculate(query: LostByComponentQuery) -> LostByComponentResult: ...
@overload
def calculate(query: TopJobsQuery) -> TopJobsResult: ...
@overload
def calculate(query: LifecycleQuery) -> LifecycleResult: ...
@overload
def calculate(query: FleetQuery) -> FleetResult: ...
@overload
def calculate(query: JobQuery) -> JobResult | None: ...
def calculate(query: AnyQuery) -> Any:
    """Run any query with its runner: what views, the API and reports call."""
    return _RUNNERS[type(query)](query).calculate()
