"""``/api/v1/fleet/summary`` and ``/api/v1/reports/weekly``: the report numbers as JSON.

The fleet (or the jobs a filter keeps) over any range of days, and one ISO week's report
against the week before (ETT_SPEC §7), from the same queries as the e-mail and the fleet
page (``ettweb.queries.weekly``), so a script reading them sees what a subscriber reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import HttpError

from ettweb.api.errors import ErrorOut
from ettweb.api.fleet import FilterParams
from ettweb.api.schemas import schema_of
from ettweb.components.known import known_components
from ettweb.queries import FleetSummaryQuery, IsoWeek, WeeklyReportQuery, calculate
from ettweb.queries.changes import DetectedChange
from ettweb.queries.top_jobs import JobLoss
from ettweb.queries.weekly import (
    TOP_JOBS,
    ComponentWeek,
    FleetSummaryResult,
    HistoryWeek,
    RolloutWeek,
    WeeklyReportResult,
    WeekNumbers,
)

#: No tags and the operation ids these endpoints had when ``ettweb.api.v1`` held them, so
#: clients generated from the OpenAPI document keep their names.
router = Router()


#: Built from the query's results (``ettweb.api.schemas``). A report's top jobs are
#: ``JobLossOut`` (a job and what it lost), not the fleet page's ``TopJobOut`` with labels.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    PeriodOut: TypeAlias = Schema
    JobLossOut: TypeAlias = Schema
    ComponentWeekOut: TypeAlias = Schema
    RolloutWeekOut: TypeAlias = Schema
    FleetSummaryOut: TypeAlias = Schema
    WeeklyReportOut: TypeAlias = Schema
else:
    PeriodOut = schema_of(WeekNumbers, "PeriodOut")
    JobLossOut = schema_of(JobLoss)
    ComponentWeekOut = schema_of(ComponentWeek)
    RolloutWeekOut = schema_of(RolloutWeek)
    FleetSummaryOut = schema_of(FleetSummaryResult, "FleetSummaryOut")
    schema_of(HistoryWeek)
    schema_of(DetectedChange, "ChangeOut")  # the changes API's name for it
    WeeklyReportOut = schema_of(WeeklyReportResult, "WeeklyReportOut")


@router.get("/fleet/summary", response={200: FleetSummaryOut, 400: ErrorOut, 401: ErrorOut},
            summary="The fleet, or the jobs a filter keeps, over a range of UTC days",
            operation_id="ettweb_api_v1_fleet_summary")
def fleet_summary(request: HttpRequest, filters: Query[FilterParams],
                  top: int = TOP_JOBS) -> dict[str, Any]:
    """ETT%, GPU-seconds, lost time by component, failures, mean time to start and recover,
    and the jobs that lost most, over ``date_from``..``date_to`` (inclusive UTC days; the
    fleet page's default range when left out) for the jobs ``model``, ``team``, ``cluster``
    and ``gpus`` keep; the answer repeats the range and filter it applied."""
    if not 1 <= top <= 50:
        raise HttpError(400, f"top: must be between 1 and 50, not {top}")
    days, jobs = filters.scope()
    return calculate(FleetSummaryQuery(days, top, jobs)).as_api()


@router.get("/reports/weekly", response={200: WeeklyReportOut, 400: ErrorOut, 401: ErrorOut},
            summary="The weekly report's numbers (ETT_SPEC §7)",
            operation_id="ettweb_api_v1_weekly_report")
def weekly_report(request: HttpRequest, week: str,
                  components: str = "") -> dict[str, Any]:
    """One ISO week (``2026-W47``) against the week before; ``components`` (comma-separated)
    are listed first, as a subscriber's report lists theirs."""
    try:
        iso_week = IsoWeek.parse(week)
    except ValueError as exc:
        raise HttpError(400, f"week: {exc}") from None
    names = tuple(name.strip() for name in components.split(",") if name.strip())
    unknown = sorted(set(names) - set(known_components()))
    if unknown:
        raise HttpError(400, f"components: unknown component {unknown[0]!r} (known: "
                             f"{', '.join(known_components())})")
    return calculate(WeeklyReportQuery(iso_week, components=names)).as_api()
