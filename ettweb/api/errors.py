"""Every refusal ``/api/v1/`` answers reads the same: JSON ``{"error": "<field>: <problem>"}``.

400 for bad input (ninja's 422 for schema errors is folded into 400 with the field named),
413 for a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (or a form with too many fields), 401
without a valid bearer token or a logged-in session, 403 for a write the caller's role
does not allow (or a session's unsafe request without its CSRF token), 404 for an unknown
rollout, job or component. Why one place: a pipeline's error handling should not depend on
which endpoint, or which layer (ninja's validation, an endpoint's own check, the query's
``ValueError``, Django's own limits on a body), refused it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError

from ettweb.queries import WindowError
from ettweb.rollouts.validation import RolloutInvalid, RolloutProblems


class ErrorOut(Schema):
    error: str


def field_of(location: Any) -> str:
    """``["body", "payload", "scope", "teams"]`` → ``scope.teams``."""
    parts = [str(p) for p in location if p not in ("body", "payload", "query", "path")]
    return ".".join(parts) or "request"


def handle_errors(api: NinjaAPI) -> None:
    """Answer every refusal on ``api`` as ``{"error": ...}`` with its status."""

    def error(request: HttpRequest, status: int, message: str) -> HttpResponse:
        return api.create_response(request, {"error": message}, status=status)

    @api.exception_handler(ValidationError)
    def _validation(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        messages = [f"{field_of(e.get('loc', ()))}: {e.get('msg', 'invalid')}"
                    for e in exc.errors]
        return error(request, 400, "; ".join(messages) or "invalid request")

    @api.exception_handler(AuthenticationError)
    def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return error(request, 401, "missing or invalid bearer token (python manage.py "
                                   "ett_api_token USERNAME issues one), and no logged-in "
                                   "session")

    @api.exception_handler(HttpError)
    def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        return error(request, exc.status_code, str(exc))

    @api.exception_handler(RolloutInvalid)
    def _invalid(request: HttpRequest, exc: RolloutInvalid) -> HttpResponse:
        """Every field's problem, the first first: a pipeline fixes them in one go."""
        problems = exc.problems if isinstance(exc, RolloutProblems) else [exc]
        return error(request, 400, "; ".join(str(problem) for problem in problems))

    @api.exception_handler(RequestDataTooBig)
    @api.exception_handler(TooManyFieldsSent)
    @api.exception_handler(TooManyFilesSent)
    def _too_big(request: HttpRequest, exc: Exception) -> HttpResponse:
        """Django raises these when the body is first read, inside the operation; left to
        Django they became its HTML 400 page (issue 40, item 4d), which a pipeline parsing
        ``{"error": ...}`` cannot read. 413: the request is refused for its size alone."""
        if isinstance(exc, RequestDataTooBig):
            limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
            sent = request.META.get("CONTENT_LENGTH") or "more than that"
            return error(request, 413, f"body: {sent} bytes is over the {limit:,}-byte limit "
                                       f"(DATA_UPLOAD_MAX_MEMORY_SIZE); send less")
        many = "fields" if isinstance(exc, TooManyFieldsSent) else "files"
        limit_name = ("DATA_UPLOAD_MAX_NUMBER_FIELDS" if many == "fields"
                      else "DATA_UPLOAD_MAX_NUMBER_FILES")
        return error(request, 413, f"body: more {many} than the "
                                   f"{getattr(settings, limit_name)} allowed ({limit_name})")

    @api.exception_handler(WindowError)
    def _window(request: HttpRequest, exc: WindowError) -> HttpResponse:
        return error(request, 400, f"window: {exc}")
