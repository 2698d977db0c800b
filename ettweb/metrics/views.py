"""``/metrics``: thin: authenticate, run the totals query, render the exposition."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from ettweb.access.tokens import TokenExpired, user_for_token
from ettweb.metrics.exposition import render
from ettweb.pages.parameters import takes
from ettweb.queries import FleetTotalsQuery, calculate

UNAUTHORIZED = ("missing or invalid bearer token: scrape with an API token "
                "(python manage.py ett_api_token prometheus), sent as "
                "'Authorization: Bearer <token>'\n")


@never_cache
@takes()
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The fleet's totals for Prometheus; 401 without a valid API token."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    try:
        refused = scheme.lower() != "bearer" or user_for_token(token.strip()) is None
        reason = UNAUTHORIZED
    except TokenExpired as exc:
        refused, reason = True, f"{exc}\n"
    if refused:
        response = HttpResponse(reason, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="ett-metrics"'
        return response
    # 0.0.4: the text format every Prometheus version reads (our names need no escaping).
    return HttpResponse(render(calculate(FleetTotalsQuery())),
                        content_type=CONTENT_TYPE_PLAIN_0_0_4)
