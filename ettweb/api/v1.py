"""``/api/v1/``: rollouts and their impact for deploy pipelines (django-ninja).

A deploy job creates a rollout right after it ships a change (``POST /api/v1/rollouts``) and
can read its measured impact later (``GET /api/v1/rollouts/<id>/impact?window=14``). The
impact comes from the same query runner as the rollout page, so the two always agree.

Errors are JSON ``{"error": "<field>: <problem>"}``: 400 for bad input (ninja's 422 for
schema errors is folded into 400 with the field named, so every refusal reads the same),
401 without a valid bearer token or a logged-in session, 403 for a write the caller's role
does not allow (or a session's unsafe request without its CSRF token), 404 for an unknown
rollout.

Who may call: deploy pipelines and scripts with a bearer token (``manage.py ett_api_token``,
acting as the token's user and that user's role), and the dashboard's own pages with the
browser's session. Reads are open to every role; writes ask ``ettweb.access.roles``.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, SessionAuth
from pydantic import ConfigDict

from ettweb.access.roles import can_edit_component, can_record_rollouts, refusal
from ettweb.access.tokens import user_for_token
from ettweb.api.changes import ChangeOut
from ettweb.api.fleet import FilterParams, ScopeOut, VerdictsOut
from ettweb.api.parameters import refuse_unknown_parameters
from ettweb.components.logic import known_components
from ettweb.queries import (
    CollectorsQuery,
    FleetSummaryQuery,
    ImpactQuery,
    IsoWeek,
    JobsQuery,
    WeeklyReportQuery,
    WindowError,
    calculate,
)
from ettweb.queries.base import one_sided_range
from ettweb.queries.collectors import DEFAULT_SILENT_AFTER_S
from ettweb.queries.impact import DEFAULT_WINDOW_DAYS
from ettweb.queries.weekly import TOP_JOBS
from ettweb.rollouts.logic import (
    RolloutInvalid,
    RolloutProblems,
    as_json,
    clean_rollout,
    save_rollout,
)
from ettweb.rollouts.models import Rollout

MAX_LIST = 500


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>`` from ``manage.py ett_api_token USERNAME``."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = user_for_token(token)
        if user is not None:
            request.user = user
        return user


class BrowserSession(SessionAuth):
    """The dashboard's log-in session, so the browser reads the API as the user it is.

    A cookie rides along with any request a page on another site makes the browser send, so
    an unsafe method through the session must carry the CSRF token (``X-CSRFToken``), as a
    form post does; bearer tokens travel in a header no other site can set, and need none.
    """

    def _get_key(self, request: HttpRequest) -> str | None:
        if self.param_name not in request.COOKIES:
            return None  # no session to forge: a pipeline's bad token stays a 401
        try:
            return super()._get_key(request)
        except HttpError:
            raise HttpError(403, "CSRF: a logged-in session's POST needs the CSRF token "
                                 "(X-CSRFToken header from the csrftoken cookie)") from None


class _MayRecordRollouts:
    """Authenticated as the parent class does, then refused with a 403 unless the user may
    record rollouts (an owner or an admin): before the body is read, so a viewer's write is
    a 403 whatever it sends. Which component they may record is checked once it is known."""

    def __call__(self, request: HttpRequest) -> Any:
        user = super().__call__(request)  # type: ignore[misc]
        if user and not can_record_rollouts(user):
            raise HttpError(403, refusal(user, "record rollouts"))
        return user


class RolloutBearerToken(_MayRecordRollouts, BearerToken):
    """A bearer token whose user may record rollouts."""


class RolloutBrowserSession(_MayRecordRollouts, BrowserSession):
    """A logged-in session (CSRF-checked) whose user may record rollouts."""


class EttAPI(NinjaAPI):
    """The API, with its OpenAPI document built once per path prefix.

    Why: django-ninja rebuilds the document from every operation's pydantic models on each
    request (about 200 ms here), yet it changes only when the code does: every route is
    registered at import time.
    """

    def get_openapi_schema(self, *, path_prefix: str | None = None,
                           path_params: dict[str, Any] | None = None) -> Any:
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        cache: dict[str, Any] = self.__dict__.setdefault("_openapi_by_prefix", {})
        if path_prefix not in cache:
            cache[path_prefix] = super().get_openapi_schema(path_prefix=path_prefix)
        return cache[path_prefix]


api = EttAPI(title="ETT API", version="1", urls_namespace="api-v1",
               auth=[BearerToken(), BrowserSession()],
               description="Rollouts and their measured ETT% impact (docs/rollouts.md), the fleet "
                           "over any days, the weekly report's numbers (docs/reports.md) and "
                           "the collectors' health.")
# Before any router is bound: every operation, mounted routers' included, refuses a query
# parameter it does not declare (a misspelt filter must not answer the unfiltered numbers).
api.add_decorator(refuse_unknown_parameters, mode="view")


# --------------------------------------------------------------------------- schemas

class RolloutIn(Schema):
    """What a deploy pipeline sends; unknown fields are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    name: str
    component: str
    at: datetime
    scope: dict[str, Any]
    notes: str | None = None
    link: str | None = None


class RolloutOut(Schema):
    id: int
    name: str
    component: str
    at: str
    scope: dict[str, Any]
    notes: str
    link: str
    created_by: str | None
    created_at: str
    simulated: bool


class GroupOut(Schema):
    jobs_before: int
    jobs_after: int
    before_ett_pct: float | None
    after_ett_pct: float | None
    change_pts: float | None
    change_rel: float | None
    ci95_pts: list[float] | None


class ComponentShiftOut(Schema):
    before_lost_pct: float | None
    after_lost_pct: float | None
    change_pts: float | None
    change_rel: float | None


class RolloutRefOut(Schema):
    id: int
    name: str
    component: str
    at: str
    scope: dict[str, Any]


class ImpactOut(Schema):
    """ETT_SPEC §6's impact document, plus this implementation's verdict."""

    rollout: RolloutRefOut
    window_days: int
    before: list[str]
    after: list[str] | None
    partial: bool
    treated: GroupOut
    control: GroupOut | None
    did_pts: float | None
    did_ci95_pts: list[float] | None
    components: dict[str, ComponentShiftOut]
    verdict: str
    verdict_reason: str


class PeriodOut(Schema):
    wall_gpu_s: float
    productive_gpu_s: float
    ett_pct: float | None
    lost_by_component_gpu_s: dict[str, float]
    failures: int
    mean_time_to_start_s: float | None
    mean_time_to_recover_s: float | None


class TopJobOut(Schema):
    job: str
    lost_gpu_s: float
    wall_gpu_s: float


class FleetSummaryOut(PeriodOut, ScopeOut):
    """The fleet (or the jobs a filter keeps) over a range of UTC days, as the fleet page
    shows it; ``days`` repeats ``date_from``/``date_to`` for clients written before them."""

    days: list[str]
    top_jobs: list[TopJobOut]


class ComponentWeekOut(Schema):
    component: str
    lost_gpu_s: float
    previous_lost_gpu_s: float
    change_gpu_s: float
    subscribed: bool


class RolloutWeekOut(VerdictsOut):
    id: int
    name: str
    component: str
    at: str
    change_pts: float | None
    ci95_pts: list[float] | None
    verdict: str
    too_early: bool


class HistoryWeekOut(Schema):
    week: str
    ett_pct: float | None


class WeeklyReportOut(Schema):
    """The weekly report's numbers (ETT_SPEC §7), what the e-mail renders."""

    week: str
    days: list[str]
    subject: str
    this: PeriodOut
    before: PeriodOut
    change_pts: float | None
    change_rel: float | None
    components: list[ComponentWeekOut]
    top_jobs: list[TopJobOut]
    rollouts: list[RolloutWeekOut]
    history: list[HistoryWeekOut]
    unrecorded_changes: list[ChangeOut]


class CollectorOut(Schema):
    source: str
    collector_id: str
    status: str = Field(description="rejected (its newest word was a refused credential), "
                                    "silent (nothing heard past silent_after_s) or reporting")
    last_seen: str = Field(description="when the server last heard from it, accepted or "
                                       "refused")
    silent_for_s: float
    silent: bool
    backlog_events: int
    backlog_bytes: int
    shipped_events: int
    dropped_events: int
    corrupted_records: int
    spool_files: int
    last_success: str | None
    rejected_lines: int
    rejection_reason: str = Field(description="why its credential was last refused "
                                              "(empty: never)")
    last_rejected: str | None


class ReasonOut(Schema):
    reason: str
    lines: int


class RejectedOut(Schema):
    received_at: str
    source: str
    job: str
    reason: str
    lines: int
    raw_preview: str
    raw_bytes: int


class CollectorsOut(Schema):
    silent_after_s: int
    silent: int
    rejected_collectors: int
    backlog_events: int
    dropped_events: int
    corrupted_records: int
    rejected_lines: int
    reasons: list[ReasonOut]
    collectors: list[CollectorOut]
    rejected: list[RejectedOut]


class JobOut(Schema):
    job: str
    model: str
    team: str
    cluster: str
    attempts: int
    status: str
    gpus: int
    start: str | None
    wall_s: float
    ett_pct: float
    lost_gpu_hours: float
    failures: int
    anomalies: int


class JobsFilterOut(Schema):
    q: str
    model: str
    team: str
    cluster: str
    gpus: str
    status: str


class JobsOut(Schema):
    """One page of jobs, with the range (null: unbounded) and filters it applied."""

    date_from: str | None
    date_to: str | None
    filter: JobsFilterOut
    sort: str
    page_size: int
    total: int
    page: int
    pages: int
    wall_gpu_s: float
    productive_gpu_s: float
    ett_pct: float
    failures: int
    lost_by_component_gpu_s: dict[str, float]
    jobs: list[JobOut]


class ErrorOut(Schema):
    error: str


# --------------------------------------------------------------------------- errors

def _error(request: HttpRequest, status: int, message: str) -> HttpResponse:
    return api.create_response(request, {"error": message}, status=status)


def _field_of(location: Any) -> str:
    """``["body", "payload", "scope", "teams"]`` → ``scope.teams``."""
    parts = [str(p) for p in location if p not in ("body", "payload", "query", "path")]
    return ".".join(parts) or "request"


@api.exception_handler(ValidationError)
def _validation(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    messages = [f"{_field_of(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors]
    return api.create_response(request, {"error": "; ".join(messages) or "invalid request"},
                               status=400)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(request, 401, "missing or invalid bearer token (python manage.py "
                                "ett_api_token USERNAME issues one), and no logged-in session")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _error(request, exc.status_code, str(exc))


@api.exception_handler(RolloutInvalid)
def _invalid(request: HttpRequest, exc: RolloutInvalid) -> HttpResponse:
    """Every field's problem, the first first: a pipeline fixes them in one go."""
    problems = exc.problems if isinstance(exc, RolloutProblems) else [exc]
    return _error(request, 400, "; ".join(str(problem) for problem in problems))


@api.exception_handler(WindowError)
def _window(request: HttpRequest, exc: WindowError) -> HttpResponse:
    return _error(request, 400, f"window: {exc}")


def _rollout(rollout_id: int) -> Rollout:
    rollout = Rollout.objects.select_related("created_by").filter(pk=rollout_id).first()
    if rollout is None:
        raise HttpError(404, f"no rollout {rollout_id}")
    return rollout


# --------------------------------------------------------------------------- endpoints

@api.post("/rollouts", response={201: RolloutOut, 400: ErrorOut, 401: ErrorOut,
                                  403: ErrorOut}, summary="Record a rollout",
          auth=[RolloutBearerToken(), RolloutBrowserSession()])
def create_rollout(request: HttpRequest, payload: RolloutIn) -> Status[dict[str, Any]]:
    """Store one rollout (ETT_SPEC §6); answers 201 with it, ``id`` included. The caller
    (the token's user) must own the rollout's component or be an admin: 403 otherwise."""
    fields = clean_rollout(payload.model_dump(), known_components())
    if not can_edit_component(request.user, fields.component):
        raise HttpError(403, refusal(request.user, f"record a rollout of {fields.component}"))
    rollout = save_rollout(fields, created_by=request.user)
    return Status(201, as_json(rollout))


@api.get("/rollouts", response={200: list[RolloutOut], 400: ErrorOut, 401: ErrorOut},
         summary="List rollouts, newest first")
def list_rollouts(request: HttpRequest, component: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
    if not 1 <= limit <= MAX_LIST:
        raise HttpError(400, f"limit: must be between 1 and {MAX_LIST}, not {limit}")
    rows = Rollout.objects.select_related("created_by").order_by("-at", "-id")
    if component:
        rows = rows.filter(component=component)
    return [as_json(rollout) for rollout in rows[:limit]]


@api.get("/rollouts/{rollout_id}", response={200: RolloutOut, 401: ErrorOut, 404: ErrorOut},
         summary="One rollout")
def get_rollout(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    return as_json(_rollout(rollout_id))


@api.get("/rollouts/{rollout_id}/impact",
         response={200: ImpactOut, 400: ErrorOut, 401: ErrorOut, 404: ErrorOut},
         summary="A rollout's measured impact (ETT_SPEC §6)")
def get_impact(request: HttpRequest, rollout_id: int,
               window: int = DEFAULT_WINDOW_DAYS) -> dict[str, Any]:
    """ETT% before and after over ``window`` UTC days (1-90), treated vs control, DiD, the
    bootstrap interval and the verdict; percentages are not rounded."""
    query = ImpactQuery(rollout_id, window)  # WindowError -> 400 before any read
    result = calculate(query)
    if result is None:
        raise HttpError(404, f"no rollout {rollout_id}")
    return result.as_api()


@api.get("/fleet/summary", response={200: FleetSummaryOut, 400: ErrorOut, 401: ErrorOut},
         summary="The fleet, or the jobs a filter keeps, over a range of UTC days")
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


@api.get("/reports/weekly", response={200: WeeklyReportOut, 400: ErrorOut, 401: ErrorOut},
         summary="The weekly report's numbers (ETT_SPEC §7)")
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


@api.get("/collectors", response={200: CollectorsOut, 400: ErrorOut, 401: ErrorOut},
         summary="Every collector's latest health and the newest rejected lines")
def collectors(request: HttpRequest, silent_after_s: int = DEFAULT_SILENT_AFTER_S,
               rejected: int = 50, source: str = "") -> dict[str, Any]:
    """The collectors page's numbers: each agent's last report (those whose credential the
    server refuses first, then the longest silent; ``silent`` past ``silent_after_s``),
    backlog, dropped and corrupted counts, and the ``rejected`` newest quarantined lines with
    the reasons' totals (optionally one ``source``'s)."""
    try:
        query = CollectorsQuery(silent_after_s=silent_after_s, rejected=rejected,
                                source=source.strip())
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise HttpError(400, f"{name}: {exc}") from None
    return calculate(query).as_api()


@api.get("/jobs", response={200: JobsOut, 400: ErrorOut, 401: ErrorOut},
         summary="One page of jobs, filtered and sorted, with the filtered set's totals")
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


api.add_router("/", "ettweb.api.fleet.router")  # the fleet and component charts' JSON
api.add_router("/", "ettweb.api.job.router")  # one job's page as JSON
api.add_router("/", "ettweb.api.changes.router")  # detected changes (ETT_SPEC §6.3)
api.add_router("/", "ettweb.api.collector_check.router")  # a collector asks about its credential
