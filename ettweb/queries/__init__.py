"""The query layer: typed query → ``calculate()`` → dataclass (PostHog-style query runners).

Every number a person or a program sees comes through here — dashboard pages, the JSON API,
the e-mail reports and ``/metrics`` — so none of them can disagree. Each query is a frozen
dataclass that validates itself; its runner reads rollups (never raw events: even one job's
timeline and rank lanes are stored by the refresh) and returns a frozen result. Modules:
``base`` (ranges, the component map, the per-day rows), ``fleet`` (trend, lost time, top
jobs, lifecycle, jobs table), ``job`` (one job), ``impact`` (a rollout's measured impact,
ETT_SPEC §6), ``markers`` (rollouts drawn on trends), ``components`` (the component pages),
``weekly`` (the fleet over any days, and the weekly report's numbers, ETT_SPEC §7),
``changes`` (detected level shifts matched to rollouts, ETT_SPEC §6.3), ``collectors``
(agents' health and the quarantine), ``metrics`` (running totals for ``/metrics``), ``jobs``
(the paginated jobs list).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, overload

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
    ChangesQueryRunner,
    ChangesResult,
    DetectedChange,
)
from ettweb.queries.choices import (
    FilterChoicesQuery,
    FilterChoicesQueryRunner,
    FilterChoicesResult,
)
from ettweb.queries.collectors import (
    CollectorRow,
    CollectorsQuery,
    CollectorsQueryRunner,
    CollectorsResult,
    RejectedRow,
)
from ettweb.queries.components import (
    ComponentQuery,
    ComponentQueryRunner,
    ComponentResult,
    ComponentsIndexQuery,
    ComponentsIndexQueryRunner,
    ComponentsIndexResult,
)
from ettweb.queries.day_totals import DayTotalsQuery, DayTotalsQueryRunner, DayTotalsResult
from ettweb.queries.headline import (
    FleetHeadlineQuery,
    FleetHeadlineQueryRunner,
    FleetHeadlineResult,
)
from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner, ImpactResult, WindowError
from ettweb.queries.job_detail import JobComputing, JobMeta, JobQuery, JobQueryRunner, JobResult
from ettweb.queries.job_list import JobListRow, JobsQuery, JobsQueryRunner, JobsResult
from ettweb.queries.lifecycle import LifecycleQuery, LifecycleQueryRunner, LifecycleResult
from ettweb.queries.lost import (
    LostByComponentQuery,
    LostByComponentQueryRunner,
    LostByComponentResult,
    LostTrendQuery,
    LostTrendQueryRunner,
    LostTrendResult,
)
from ettweb.queries.markers import (
    RolloutListQuery,
    RolloutListQueryRunner,
    RolloutListResult,
    RolloutMarker,
    RolloutMarkersQuery,
    RolloutMarkersQueryRunner,
    RolloutMarkersResult,
)
from ettweb.queries.metrics import (
    FleetTotalsQuery,
    FleetTotalsQueryRunner,
    FleetTotalsResult,
    ScopeTotals,
)
from ettweb.queries.top_jobs import TopJobsQuery, TopJobsQueryRunner, TopJobsResult
from ettweb.queries.trend import TrendQuery, TrendQueryRunner, TrendResult
from ettweb.queries.weekly import (
    FleetSummaryQuery,
    FleetSummaryQueryRunner,
    FleetSummaryResult,
    IsoWeek,
    WeeklyReportQuery,
    WeeklyReportQueryRunner,
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
]

AnyQuery = (TrendQuery | LostByComponentQuery | TopJobsQuery | LifecycleQuery
            | JobQuery | ImpactQuery
            | ComponentQuery | ComponentsIndexQuery | RolloutMarkersQuery | WeeklyReportQuery
            | FleetSummaryQuery | CollectorsQuery | FleetTotalsQuery | JobsQuery
            | LostTrendQuery | FilterChoicesQuery | RolloutListQuery | FleetHeadlineQuery
            | DayTotalsQuery | ChangesQuery)

_RUNNERS: dict[type, Any] = {
    TrendQuery: TrendQueryRunner, LostByComponentQuery: LostByComponentQueryRunner,
    TopJobsQuery: TopJobsQueryRunner, LifecycleQuery: LifecycleQueryRunner,
    JobQuery: JobQueryRunner, ImpactQuery: ImpactQueryRunner,
    ComponentQuery: ComponentQueryRunner, ComponentsIndexQuery: ComponentsIndexQueryRunner,
    RolloutMarkersQuery: RolloutMarkersQueryRunner, WeeklyReportQuery: WeeklyReportQueryRunner,
    FleetSummaryQuery: FleetSummaryQueryRunner, CollectorsQuery: CollectorsQueryRunner,
    FleetTotalsQuery: FleetTotalsQueryRunner, JobsQuery: JobsQueryRunner,
    LostTrendQuery: LostTrendQueryRunner,
    FilterChoicesQuery: FilterChoicesQueryRunner, RolloutListQuery: RolloutListQueryRunner,
    FleetHeadlineQuery: FleetHeadlineQueryRunner, DayTotalsQuery: DayTotalsQueryRunner,
    ChangesQuery: ChangesQueryRunner,
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
def calculate(query: JobQuery) -> JobResult | JobComputing | None: ...
@overload
def calculate(query: ImpactQuery) -> ImpactResult | None: ...
@overload
def calculate(query: ComponentQuery) -> ComponentResult | None: ...
@overload
def calculate(query: ComponentsIndexQuery) -> ComponentsIndexResult: ...
@overload
def calculate(query: RolloutMarkersQuery) -> RolloutMarkersResult: ...
@overload
def calculate(query: WeeklyReportQuery) -> WeeklyReportResult: ...
@overload
def calculate(query: FleetSummaryQuery) -> FleetSummaryResult: ...
@overload
def calculate(query: CollectorsQuery) -> CollectorsResult: ...
@overload
def calculate(query: FleetTotalsQuery) -> FleetTotalsResult: ...
@overload
def calculate(query: JobsQuery) -> JobsResult: ...
@overload
def calculate(query: LostTrendQuery) -> LostTrendResult: ...
@overload
def calculate(query: FleetHeadlineQuery) -> FleetHeadlineResult: ...
@overload
def calculate(query: FilterChoicesQuery) -> FilterChoicesResult: ...
@overload
def calculate(query: RolloutListQuery) -> RolloutListResult: ...
@overload
def calculate(query: DayTotalsQuery) -> DayTotalsResult: ...
@overload
def calculate(query: ChangesQuery) -> ChangesResult: ...
def calculate(query: AnyQuery) -> Any:
    """Run any query with its runner: what views, the API and reports call.

    Inside :func:`memoized` (one GET request: ``QueryMemoMiddleware``) an equal query is run
    once: the fleet page's tiles, charts and tables ask for the same lost time and lifecycle
    more than once, and each is a scan of the per-day rows. A query that cannot be hashed
    (one holding a dict) is simply run.
    """
    memo = _MEMO.get()
    if memo is None:
        return _RUNNERS[type(query)](query).calculate()
    try:
        return memo[query]
    except KeyError:
        result = memo[query] = _RUNNERS[type(query)](query).calculate()
        return result
    except TypeError:  # unhashable
        return _RUNNERS[type(query)](query).calculate()


_MEMO: ContextVar[dict[Any, Any] | None] = ContextVar("ett_query_memo", default=None)


@contextmanager
def memoized() -> Iterator[None]:
    """Equal queries share one result until the block ends. Why only in a block: results
    are snapshots, so a memo must not outlive the one read-only request that asked."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)
