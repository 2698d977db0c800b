"""``GET /api/v1/jobs/{job}``: one job's page as JSON, from the same query as the page.

Mounted on the API by one ``api.add_router`` line in ``ettweb.api.v1``, so it shares that
API's JSON errors (``{"error": ...}``; 404 for an unknown job). Like the other chart and
table endpoints it takes a bearer token (``manage.py ett_api_token``) or the browser's
logged-in session.

A job whose events are stored but whose rollup is not (yet) is a 202 with
``"status": "computing"``, what is known of it and a ``Retry-After`` header: a GET never
writes, so the worker computes it (``ettweb.queries.job_detail``), and the same request a few
seconds later gets the 200.

Job ids are free text and may hold ``/``: the path parameter takes the rest of the path,
slashes included (``/api/v1/jobs/team/exp-1`` is job ``team/exp-1``). Any other character
that is not allowed in a URL path is percent-encoded as usual (``%20``, ``%3F``, and
``%2F`` for a slash also works).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest, HttpResponse
from ninja import Router, Schema, Status
from ninja.errors import HttpError

from ettweb.api.schemas import schema_of
from ettweb.queries import JobComputing, JobQuery, calculate
from ettweb.queries.job_detail import (
    AttemptRow,
    FindingRow,
    JobResult,
    LaneRow,
    RecoveryRow,
    TimelineRow,
)

#: No ``auth`` here: mounted on ``ettweb.api.v1.api``, the router takes the API's (a bearer
#: token or the browser's CSRF-checked session).
router = Router(tags=["jobs"])

class JobErrorOut(Schema):
    error: str


#: Built from the query's results (``ettweb.api.schemas``), under the names clients know.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    JobDetailOut: TypeAlias = Schema
    JobComputingOut: TypeAlias = Schema
else:
    schema_of(AttemptRow, "JobAttemptOut")
    schema_of(RecoveryRow, "JobRecoveryOut")
    schema_of(TimelineRow, "JobTimelineOut")
    schema_of(LaneRow, "JobLaneOut")
    schema_of(FindingRow, "JobFindingOut")
    JobDetailOut = schema_of(JobResult, "JobDetailOut")
    JobComputingOut = schema_of(JobComputing, "JobComputingOut")


@router.get("/jobs/{path:job}",
            response={200: JobDetailOut, 202: JobComputingOut, 401: JobErrorOut,
                      404: JobErrorOut},
            summary="One job's page: headline, attempts, recoveries, lost time, timeline, lanes",
            operation_id="ettweb_api_job_job_detail")
def job_detail(request: HttpRequest, response: HttpResponse,
               job: str) -> dict[str, Any] | Status[dict[str, Any]]:
    """Everything the job page shows, read from the job's stored rollups (never its
    events); a 202 while the worker computes them. ``job`` may contain ``/``."""
    result = calculate(JobQuery(job=job))
    if result is None:
        raise HttpError(404, f"job: no events for job {job!r}")
    if isinstance(result, JobComputing):
        body = result.as_api()
        response["Retry-After"] = str(body["retry_after_s"])
        return Status(202, body)
    return result.as_api()
