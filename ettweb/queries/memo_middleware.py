"""The query memo of a read-only request: one answer per equal query while a GET is served.

It lives in the query layer because it is the registry's memo, switched on per request; the
platform middleware below the apps knows nothing of queries.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ettweb.queries.registry import memoized


class QueryMemoMiddleware:
    """A GET or HEAD request calculates each distinct query once (``ettweb.queries.memoized``):
    a page's tiles and charts often ask the query layer the same question. Requests that
    may write get no memo, so nothing they read can be stale after their own write."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        with memoized():
            return self.get_response(request)
