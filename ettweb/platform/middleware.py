"""Requests refused before any view runs, and refusals drawn as pages for a browser.

A NUL character (``%00``) in the path or a query parameter reaches Postgres as text, which
Postgres refuses with an error that would surface as a 500. Forms already refuse NUL in the
fields they validate (Django's ``ProhibitNullCharactersValidator``), but path parameters
(``/jobs/<job>/``, ``/components/<name>/``) and the API's query parameters do not pass
through forms; one check here covers every page, including ones added later.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

NUL = "\x00"


def _nul_in(request: HttpRequest) -> str | None:
    """Where a NUL is, in words, or None."""
    if NUL in request.path_info:
        return "the path"
    for key, values in request.GET.lists():
        if NUL in key or any(NUL in value for value in values):
            return f"query parameter {key.replace(NUL, '')!r}"
    return None


class RefuseNulMiddleware:
    """400 ``bad request: NUL character in <where>`` instead of a database error (under
    ``/api/`` as the API's ``{"error": ...}``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = _nul_in(request)
        if where is not None:
            reason = f"bad request: NUL character in {where}"
            if request.path_info.startswith("/api/"):  # the API's refusals are JSON
                return JsonResponse({"error": reason}, status=400)
            return HttpResponseBadRequest(reason, content_type="text/plain")
        return self.get_response(request)


def _wants_html(request: HttpRequest) -> bool:
    """A browser asks for HTML by name; curl and programs (``*/*``, or nothing) get text."""
    return "text/html" in request.headers.get("Accept", "")


class ErrorPageMiddleware:
    """A page's plain-text refusal (a 400 naming the parameter) answered to a browser is drawn
    as a page in the site's layout, with each problem on its own line and a way back; programs
    keep the one line of text they can parse. The API answers JSON and is left alone."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (response.status_code != 400 or not _wants_html(request)
                or not response.get("Content-Type", "").startswith("text/plain")
                or request.path.startswith("/api/")):
            return response
        from django.shortcuts import render  # templates load apps: not at import time

        reason = response.content.decode(errors="replace")
        heading, _, detail = reason.partition(": ")
        return render(request, "400.html", {
            "heading": heading, "problems": detail.split("; ") if detail else [reason],
            "back": request.path}, status=400)
