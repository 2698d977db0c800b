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

from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Router, Schema, Status
from ninja.errors import HttpError

from ettweb.queries import JobComputing, JobQuery, calculate

#: No ``auth`` here: mounted on ``ettweb.api.v1.api``, the router takes the API's (a bearer
#: token or the browser's CSRF-checked session).
router = Router(tags=["jobs"])

Piece = tuple[str, float, float]


class JobErrorOut(Schema):
    error: str


class JobAttemptOut(Schema):
    attempt: int
    status: str
    gpus: int
    start: float
    end: float
    duration_s: float
    repeated_steps: int


class JobRecoveryOut(Schema):
    attempt: int
    start: float
    end: float
    seconds: float
    by_category: dict[str, float]


class JobTimelineOut(Schema):
    """One attempt's category timeline: ``[category, start, end]`` pieces (epoch s)."""

    attempt: int
    bin_s: float
    pieces: list[Piece]


class JobLaneOut(Schema):
    """Ranks that did the same thing throughout an attempt: ``[state, start, end]`` runs."""

    attempt: int
    ranks: str
    rank_count: int
    bin_s: float
    runs: list[Piece]


class JobDetailOut(Schema):
    """The job page's numbers: headline, attempts, recoveries with their parts, lost time by
    category and component, the category timeline and the rank lanes. Seconds unrounded."""

    job: str
    status: Literal["ready"]
    model: str
    team: str
    cluster: str
    ett_pct: float
    wall_s: float
    productive_s: float
    wall_gpu_s: float
    productive_gpu_s: float
    time_to_start_s: float | None
    time_to_recover_s: list[float]
    failures: int
    repeated_steps: int
    anomalies: dict[str, int]
    quarantined: int
    lost_s: dict[str, float]
    lost_by_component_s: dict[str, float]
    lost_by_component_gpu_s: dict[str, float]
    attempts: list[JobAttemptOut]
    recoveries: list[JobRecoveryOut]
    timeline: list[JobTimelineOut]
    lanes: list[JobLaneOut]


class JobComputingOut(Schema):
    """A job whose events are stored but whose numbers are not yet: the worker is computing
    them. Ask again after ``retry_after_s`` seconds (the ``Retry-After`` header)."""

    job: str
    status: Literal["computing"]
    model: str
    team: str
    cluster: str
    events: int
    last_event_time: float | None
    retry_after_s: int


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
