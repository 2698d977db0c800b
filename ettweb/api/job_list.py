"""``GET /api/v1/jobs``: the jobs page's table as JSON, one page at a time.

The same query as ``/jobs/`` (``ettweb.queries.job_list``): the filters, the sort and the
filtered set's totals, so a script paging through it sees the rows the page shows. One
job's own page is ``ettweb.api.job_detail``.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from ettweb.api.errors import ErrorOut
from ettweb.api.schemas import schema_of
from ettweb.queries import JobsQuery, calculate
from ettweb.queries.base import one_sided_range
from ettweb.queries.job_list import JobListRow, JobsFilter, JobsResult

#: No tags and the operation id this endpoint had when ``ettweb.api.v1`` held it, so
#: clients generated from the OpenAPI document keep their names.
router = Router()


#: Built from the query's results (``ettweb.api.schemas``), under the names clients know.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    JobOut: TypeAlias = Schema
    JobsFilterOut: TypeAlias = Schema

    class JobsBodyOut(Schema): ...  # a base of the answer: a class, for mypy
else:
    JobOut = schema_of(JobListRow, "JobOut")
    JobsFilterOut = schema_of(JobsFilter, "JobsFilterOut")
    JobsBodyOut = schema_of(JobsResult, "JobsBodyOut")


class JobsScopeOut(Schema):
    """The range (null: unbounded), filters, sort and page size a page of jobs applied."""

    date_from: str | None
    date_to: str | None
    filter: JobsFilterOut
    sort: str
    page_size: int


class JobsOut(JobsBodyOut, JobsScopeOut):
    """One page of jobs, with the range (null: unbounded) and filters it applied."""


@router.get("/jobs", response={200: JobsOut, 400: ErrorOut, 401: ErrorOut},
            summary="One page of jobs, filtered and sorted, with the filtered set's totals",
            operation_id="ettweb_api_v1_jobs")
def jobs(request: HttpRequest, date_from: date | None = None, date_to: date | None = None,
         q: str = "", model: str = "", team: str = "", cluster: str = "", gpus: str = "",
         status: str = "", sort: str = "-lost_gpu_hours", page: int = 1,
         page_size: int = 50) -> dict[str, Any]:
    """The jobs page's table as JSON: ``sort`` is one of job, ett_pct, lost_gpu_hours,
    failures, gpus, start, attempts, wall (``-`` for descending); a date range keeps jobs
    whose window overlaps it."""
    try:
        days = one_sided_range(date_from, date_to)
    except (ValueError, OverflowError) as exc:
        raise HttpError(400, f"date_from/date_to: {exc}") from None
    try:
        query = JobsQuery(range=days, search=q, model=model, team=team, cluster=cluster,
                          gpus=gpus, status=status, sort=sort, page=page, page_size=page_size)
    except ValueError as exc:
        raise HttpError(400, f"{str(exc).split(' ', 1)[0]}: {exc}") from None
    result = calculate(query)
    if page > result.pages:
        raise HttpError(400, f"page: {page} is past the last page, {result.pages}")
    return {**query.scope_api(), **result.as_api()}
