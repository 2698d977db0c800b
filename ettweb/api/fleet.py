"""``/api/v1/fleet/…`` and ``/api/v1/components…``: the JSON behind the fleet overview's and
the component pages' charts and tables.

Every endpoint takes the pages' parameters (``date_from``, ``date_to``, ``interval``,
``group_by``, ``model``, ``team``, ``cluster``, ``gpus``) with the pages' defaults (the last 30
days with data) and answers from the same query as the page (``ettweb.queries``), so a chart
and its endpoint cannot disagree. Numbers are unrounded GPU-seconds and percentages. A bad
parameter is a 400 ``{"error": "<parameter>: <problem>"}``, an unknown component a 404; an
unknown model, team or cluster is no error, it matches no job.

Auth: a bearer token (``manage.py ett_api_token``), as for rollouts, or the browser's
session. Mounted by ``ettweb.api.v1`` (``api.add_router``), whose error handlers apply.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from ettweb.api.schemas import schema_of
from ettweb.queries import (
    ComponentQuery,
    ComponentsIndexQuery,
    DateRange,
    FleetHeadlineQuery,
    JobFilter,
    LifecycleQuery,
    LostByComponentQuery,
    LostTrendQuery,
    RolloutMarkersQuery,
    TopJobsQuery,
    TrendQuery,
    calculate,
)
from ettweb.queries.base import MAX_LABEL_CHARS, range_or_default
from ettweb.queries.components import (
    ComponentJob,
    ComponentModel,
    ComponentPoint,
    ComponentResult,
    ComponentRollout,
    Owner,
    RolloutsOutside,
)
from ettweb.queries.components_index import ComponentRow, ComponentsIndexResult
from ettweb.queries.exposed import as_api
from ettweb.queries.headline import FleetHeadlineResult
from ettweb.queries.lifecycle import LifecyclePoint, LifecycleResult
from ettweb.queries.lost import ComponentLoss, LostByComponentResult, LostTrendResult
from ettweb.queries.markers import RolloutMarker
from ettweb.queries.top_jobs import TopJob, TopJobsResult
from ettweb.queries.trend import TrendPoint, TrendResult

#: No ``auth`` here: a router mounted on ``ettweb.api.v1.api`` takes the API's (a bearer
#: token or the browser's CSRF-checked session), so every endpoint authenticates alike.
router = Router(tags=["fleet"])


# --------------------------------------------------------------------------- parameters

class FilterParams(Schema):
    """The pages' range and job filter; empty labels are any, an unknown one matches none."""

    date_from: date | None = Field(None, description="first UTC day (default: 30 days "
                                                     "before date_to)")
    date_to: date | None = Field(None, description="last UTC day (default: the last day "
                                                   "with data)")
    model: str = Field("", max_length=MAX_LABEL_CHARS, description="exact model")
    team: str = Field("", max_length=MAX_LABEL_CHARS, description="exact team")
    cluster: str = Field("", max_length=MAX_LABEL_CHARS, description="exact cluster")
    gpus: str = Field("", description="GPU-size bucket: 1, 2-8, 9-64, 65-512 or 513+")

    def scope(self) -> tuple[DateRange, JobFilter]:
        """The range and filter these ask for, or a 400 naming the parameter."""
        try:
            days = range_or_default(self.date_from, self.date_to)
        except ValueError as exc:
            raise HttpError(400, f"{_named(str(exc), ('date_from', 'date_to'))}: {exc}") from None
        try:
            jobs = JobFilter(model=self.model, team=self.team, cluster=self.cluster,
                             gpus=self.gpus)
        except ValueError as exc:
            raise HttpError(400, f"{str(exc).split(' ', 1)[0]}: {exc}") from None
        return days, jobs


def _named(message: str, names: tuple[str, ...]) -> str:
    """The parameter a range error is about (its first word), else all of ``names``."""
    first = message.split(" ", 1)[0]
    return first if first in names else "/".join(names)


Interval = Literal["day", "week"]
GroupBy = Literal["none", "model", "team", "cluster", "gpus"]


# --------------------------------------------------------------------------- schemas

#: The schemas built from the query results they render (``ettweb.api.schemas``), under the
#: names clients know; the answers below wrap them in the days and jobs they cover.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    TrendPointOut: TypeAlias = Schema
    ComponentLossOut: TypeAlias = Schema
    LifecyclePointOut: TypeAlias = Schema
    TopJobOut: TypeAlias = Schema
    OwnerOut: TypeAlias = Schema
    FilterOut: TypeAlias = Schema
    MarkerOut: TypeAlias = Schema

    # Bases of the answers below: classes of their own, so mypy sees a consistent order.
    class DateRangeOut(Schema): ...
    class TrendBodyOut(Schema): ...
    class LostTrendBodyOut(Schema): ...
    class LifecycleBodyOut(Schema): ...
    class TopJobsBodyOut(Schema): ...
    class LostByComponentBodyOut(Schema): ...
    class ComponentBodyOut(Schema): ...
    class HeadlineBodyOut(Schema): ...
    class ComponentsBodyOut(Schema): ...
else:
    TrendPointOut = schema_of(TrendPoint)
    ComponentLossOut = schema_of(ComponentLoss)
    LifecyclePointOut = schema_of(LifecyclePoint)
    TopJobOut = schema_of(TopJob)
    OwnerOut = schema_of(Owner)
    schema_of(ComponentPoint)
    schema_of(ComponentJob)
    schema_of(ComponentModel)
    FilterOut = schema_of(JobFilter, "FilterOut")
    MarkerOut = schema_of(RolloutMarker, "MarkerOut")
    schema_of(ComponentRollout, "ComponentRolloutOut")
    schema_of(RolloutsOutside, "RolloutsOutsideOut")
    DateRangeOut = schema_of(DateRange, "DateRangeOut")
    TrendBodyOut = schema_of(TrendResult, "TrendBodyOut")
    LostTrendBodyOut = schema_of(LostTrendResult, "LostTrendBodyOut")
    LifecycleBodyOut = schema_of(LifecycleResult, "LifecycleBodyOut")
    TopJobsBodyOut = schema_of(TopJobsResult, "TopJobsBodyOut")
    LostByComponentBodyOut = schema_of(LostByComponentResult, "LostByComponentBodyOut")
    ComponentBodyOut = schema_of(ComponentResult, "ComponentBodyOut")
    HeadlineBodyOut = schema_of(FleetHeadlineResult, "HeadlineBodyOut")
    schema_of(ComponentRow, "ComponentRowOut")
    ComponentsBodyOut = schema_of(ComponentsIndexResult, "ComponentsBodyOut")


class ScopeOut(DateRangeOut):
    """The days and jobs an answer covers (defaults filled in)."""

    filter: FilterOut


class IntervalScopeOut(ScopeOut):
    """The days and jobs an answer covers, and the periods (day or week) it folds them in."""

    interval: str


class PreviousTrendOut(DateRangeOut, TrendBodyOut):
    """The same trend over as many days just before (``compare=previous``)."""


class TrendOut(ScopeOut, TrendBodyOut):
    """The ETT% trend as the fleet page draws it: points per period (and group), the net
    change it is headed by, its rollout markers and, when asked, the previous period."""

    interval: str
    group_by: str
    rollouts: list[MarkerOut]
    previous: PreviousTrendOut | None


class LostByComponentOut(LostByComponentBodyOut, ScopeOut):
    """Lost GPU-seconds per owning component over the days and jobs asked for."""


class LostTrendOut(LostTrendBodyOut, IntervalScopeOut):
    """Lost GPU-seconds per component per period, over the days and jobs asked for."""


class LifecycleOut(LifecycleBodyOut, IntervalScopeOut):
    """The lifecycle numbers per period, over the days and jobs asked for."""


class TopJobsOut(TopJobsBodyOut, ScopeOut):
    """The jobs that lost the most inside the days and jobs asked for."""


class HeadlineOut(HeadlineBodyOut, IntervalScopeOut):
    """The fleet page's headline tiles, over the days and jobs asked for."""


class ComponentsOut(ComponentsBodyOut, IntervalScopeOut):
    """Every owning component's lost time, over the days and jobs asked for."""


class ComponentOut(ComponentBodyOut, IntervalScopeOut):
    """One component's page: lost time per period, its top jobs and models, its rollouts."""


class FleetErrorOut(Schema):
    error: str


ERRORS: dict[int, type[Schema]] = {400: FleetErrorOut, 401: FleetErrorOut}


def _scope(days: DateRange, jobs: JobFilter) -> dict[str, Any]:
    return {"date_from": days.date_from.isoformat(), "date_to": days.date_to.isoformat(),
            "filter": jobs.as_api()}


# --------------------------------------------------------------------------- the fleet

@router.get("/fleet/trend", response={200: TrendOut, **ERRORS},
            summary="ETT% per day or week, as the fleet page's trend draws it")
def fleet_trend(request: HttpRequest, filters: Query[FilterParams], interval: Interval = "day",
                group_by: GroupBy = "none",
                compare: Literal["", "previous"] = "") -> dict[str, Any]:
    """GPU-weighted ETT% per period (one series per ``group_by`` value), the whole range's,
    the net change from the first period with data to the last, the rollouts the chart
    marks, and with ``compare=previous`` the same trend over as many days just before."""
    days, jobs = filters.scope()
    query = TrendQuery(days, interval, group_by, jobs)
    earlier = query.previous() if compare else None
    previous = None
    if earlier is not None:
        previous = {**calculate(earlier).as_api(), "date_from": earlier.range.date_from.isoformat(),
                    "date_to": earlier.range.date_to.isoformat()}
    markers = calculate(RolloutMarkersQuery(days, jobs=jobs)).markers
    return {**_scope(days, jobs), **calculate(query).as_api(), "interval": interval,
            "group_by": group_by, "rollouts": [as_api(m) for m in markers],
            "previous": previous}


@router.get("/fleet/headline", response={200: HeadlineOut, **ERRORS},
            summary="The fleet page's headline tiles")
def fleet_headline(request: HttpRequest, filters: Query[FilterParams],
                   interval: Interval = "day") -> dict[str, Any]:
    """The range's last 7 days' ETT% against the 7 before (points and relative), lost
    GPU-hours and "GPUs' worth" lost (lost GPU-hours / hours in the range), failures per
    1,000 GPU-hours, and the trend's net change at ``interval``."""
    days, jobs = filters.scope()
    result = calculate(FleetHeadlineQuery(days, interval, jobs))
    return {**_scope(days, jobs), "interval": interval, **result.as_api()}


@router.get("/fleet/lost-by-component", response={200: LostByComponentOut, **ERRORS},
            summary="Lost GPU-seconds per owning component over the range")
def fleet_lost_by_component(request: HttpRequest,
                            filters: Query[FilterParams]) -> dict[str, Any]:
    """The fleet page's "lost GPU-hours by component" chart and table (largest first, with
    each component's categories)."""
    days, jobs = filters.scope()
    return {**_scope(days, jobs), **calculate(LostByComponentQuery(days, jobs)).as_api()}


@router.get("/fleet/lost-trend", response={200: LostTrendOut, **ERRORS},
            summary="Lost GPU-seconds per component per day or week (the stacked chart)")
def fleet_lost_trend(request: HttpRequest, filters: Query[FilterParams],
                     interval: Interval = "day") -> dict[str, Any]:
    """One value per period for each component (largest loser first)."""
    days, jobs = filters.scope()
    result = calculate(LostTrendQuery(days, interval, jobs))
    return {**_scope(days, jobs), "interval": interval, **result.as_api()}


@router.get("/fleet/lifecycle", response={200: LifecycleOut, **ERRORS},
            summary="Time to start, time to recover, restart tax and failures per period")
def fleet_lifecycle(request: HttpRequest, filters: Query[FilterParams],
                    interval: Interval = "day") -> dict[str, Any]:
    """The fleet page's lifecycle table and restart-tax chart: per period the jobs started
    and their mean time to start, recoveries and their mean time to recover, the restart tax
    by category and the failures."""
    days, jobs = filters.scope()
    result = calculate(LifecycleQuery(days, interval, jobs))
    return {**_scope(days, jobs), "interval": interval, **result.as_api()}


@router.get("/fleet/top-jobs", response={200: TopJobsOut, **ERRORS},
            summary="The jobs that lost the most GPU-hours inside the range")
def fleet_top_jobs(request: HttpRequest, filters: Query[FilterParams],
                   limit: int = 10) -> dict[str, Any]:
    """The fleet page's top-jobs table (``limit`` 1-1000, 10 by default)."""
    days, jobs = filters.scope()
    if not 1 <= limit <= 1000:
        raise HttpError(400, f"limit: must be between 1 and 1000, not {limit}")
    return {**_scope(days, jobs), **calculate(TopJobsQuery(days, limit, jobs)).as_api()}


# --------------------------------------------------------------------------- components

@router.get("/components", response={200: ComponentsOut, **ERRORS},
            summary="Every owning component's lost time over the range")
def components(request: HttpRequest, filters: Query[FilterParams],
               interval: Interval = "day") -> dict[str, Any]:
    """The components page's table: each component's lost GPU-seconds, its share of the
    (filtered) fleet's lost time and wall time, its owner team, its owners and its rollouts
    in the range; and its chart: each losing component's share of each period's wall time
    (``lost_share_pts``, one value per ``periods``)."""
    days, jobs = filters.scope()
    result = calculate(ComponentsIndexQuery(days, jobs, interval))
    return {**_scope(days, jobs), "interval": interval, **result.as_api()}


@router.get("/components/{path:name}",
            response={200: ComponentOut, **ERRORS, 404: FleetErrorOut},
            summary="One component's lost time, top jobs and models, and rollouts")
def component(request: HttpRequest, name: str, filters: Query[FilterParams],
              interval: Interval = "day") -> dict[str, Any]:
    """What ``/components/<name>/`` shows; ``name`` is the component's own text (URL-encode
    it). 404 for a component nobody owns time under."""
    days, jobs = filters.scope()
    result = calculate(ComponentQuery(name, days, interval, jobs=jobs))
    if result is None:
        raise HttpError(404, f"no component {name!r}")
    return {**_scope(days, jobs), "interval": interval, **result.as_api()}
