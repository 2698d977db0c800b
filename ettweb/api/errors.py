"""Every refusal ``/api/v1/`` answers reads the same: JSON ``{"error": "<field>: <problem>"}``.

400 for bad input (ninja's 422 for schema errors is folded into 400 with the field named),
401 without a valid bearer token or a logged-in session, 403 for a write the caller's role
does not allow (or a session's unsafe request without its CSRF token), 404 for an unknown
rollout, job or component. Why one place: a pipeline's error handling should not depend on
which endpoint, or which layer (ninja's validation, an endpoint's own check, the query's
``ValueError``), refused it.
"""

from __future__ import annotations

from typing import Any

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

    @api.exception_handler(WindowError)
    def _window(request: HttpRequest, exc: WindowError) -> HttpResponse:
        return error(request, 400, f"window: {exc}")
