"""The query layer: typed query → ``calculate()`` → dataclass (PostHog-style query runners).

Every number a person or a program sees comes through here — dashboard pages, the JSON API,
the e-mail reports and ``/metrics`` — so none of them can disagree. Each query is a frozen
dataclass that validates itself; its runner reads rollups (never raw events: even one job's
timeline and rank lanes are stored by the refresh) and returns a frozen result. ``registry``
is how a query finds its runner; ``base`` holds what every query shares (ranges, the job
filter, the component map, the per-day rows); each other module is one family of queries:
``trend``, ``lost``, ``top_jobs``, ``lifecycle``, ``headline``, ``day_totals`` (the fleet
pages), ``job_detail`` (one job), ``job_list`` (the paginated jobs list), ``impact`` (a
rollout's measured impact, ETT_SPEC §6), ``markers`` (rollouts drawn on trends),
``components`` (the component pages), ``weekly`` (the fleet over any days, and the weekly
report's numbers, ETT_SPEC §7), ``changes`` (detected level shifts matched to rollouts,
ETT_SPEC §6.3), ``collectors`` (agents' health and the quarantine), ``choices`` (the filters'
choices) and ``metrics`` (running totals for ``/metrics``).
"""

from __future__ import annotations

from ettweb.queries.base import (
    ALL,
    ANY_JOB,
    GPU_BUCKETS,
    GROUPINGS,
    HOUR_S,
    INTERVALS,
    MAX_RANGE_DAYS,
    DateRange,
    Grouping,
    Interval,
    JobFilter,
    default_range,
    gpu_bucket,
    phase_components,
)
from ettweb.queries.changes import (
    ChangesQuery,
    ChangesResult,
    DetectedChange,
)
from ettweb.queries.choices import (
    FilterChoicesQuery,
    FilterChoicesResult,
)
from ettweb.queries.collectors import (
    CollectorRow,
    CollectorsQuery,
    CollectorsResult,
    RejectedRow,
)
from ettweb.queries.components import ComponentQuery, ComponentResult
from ettweb.queries.components_index import ComponentsIndexQuery, ComponentsIndexResult
from ettweb.queries.day_totals import DayTotalsQuery, DayTotalsQueryRunner, DayTotalsResult
from ettweb.queries.headline import (
    FleetHeadlineQuery,
    FleetHeadlineResult,
)
from ettweb.queries.impact import ImpactQuery, ImpactResult, WindowError
from ettweb.queries.job_detail import JobComputing, JobMeta, JobQuery, JobQueryRunner, JobResult
from ettweb.queries.job_list import JobListRow, JobsQuery, JobsResult
from ettweb.queries.lifecycle import LifecycleQuery, LifecycleResult
from ettweb.queries.lost import (
    LostByComponentQuery,
    LostByComponentResult,
    LostTrendQuery,
    LostTrendResult,
)
from ettweb.queries.markers import (
    RolloutListQuery,
    RolloutListResult,
    RolloutMarker,
    RolloutMarkersQuery,
    RolloutMarkersResult,
)
from ettweb.queries.metrics import (
    FleetTotalsQuery,
    FleetTotalsResult,
    ScopeTotals,
)
from ettweb.queries.registry import _MEMO as _MEMO
from ettweb.queries.registry import Query, QueryRunner, calculate, memoized, runner_for
from ettweb.queries.top_jobs import TopJobsQuery, TopJobsResult
from ettweb.queries.trend import TrendQuery, TrendResult
from ettweb.queries.weekly import (
    FleetSummaryQuery,
    FleetSummaryResult,
    IsoWeek,
    WeeklyReportQuery,
    WeeklyReportResult,
)

__all__ = [
    "ALL",
    "ANY_JOB",
    "GPU_BUCKETS",
    "GROUPINGS",
    "HOUR_S",
    "INTERVALS",
    "MAX_RANGE_DAYS",
    "ChangesQuery",
    "ChangesResult",
    "CollectorRow",
    "CollectorsQuery",
    "CollectorsResult",
    "ComponentQuery",
    "ComponentResult",
    "ComponentsIndexQuery",
    "ComponentsIndexResult",
    "DateRange",
    "DayTotalsQuery",
    "DayTotalsQueryRunner",
    "DayTotalsResult",
    "DetectedChange",
    "FilterChoicesQuery",
    "FilterChoicesResult",
    "FleetHeadlineQuery",
    "FleetHeadlineResult",
    "FleetSummaryQuery",
    "FleetSummaryResult",
    "FleetTotalsQuery",
    "FleetTotalsResult",
    "Grouping",
    "ImpactQuery",
    "ImpactResult",
    "Interval",
    "IsoWeek",
    "JobComputing",
    "JobFilter",
    "JobListRow",
    "JobMeta",
    "JobQuery",
    "JobQueryRunner",
    "JobResult",
    "JobsQuery",
    "JobsResult",
    "LifecycleQuery",
    "LifecycleResult",
    "LostByComponentQuery",
    "LostByComponentResult",
    "LostTrendQuery",
    "LostTrendResult",
    "Query",
    "QueryRunner",
    "RejectedRow",
    "RolloutListQuery",
    "RolloutListResult",
    "RolloutMarker",
    "RolloutMarkersQuery",
    "RolloutMarkersResult",
    "ScopeTotals",
    "TopJobsQuery",
    "TopJobsResult",
    "TrendQuery",
    "TrendResult",
    "WeeklyReportQuery",
    "WeeklyReportResult",
    "WindowError",
    "calculate",
    "default_range",
    "gpu_bucket",
    "memoized",
    "phase_components",
    "runner_for",
]
