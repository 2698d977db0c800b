"""Thin views: run a query, build figures from its result, render a template."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from ettweb.dashboard import figures
from ettweb.dashboard.queries import FleetQuery, FleetQueryRunner, JobQuery, JobQueryRunner

BROKER_TIMEOUT_S = 2


@login_required
@require_GET
def jobs(request: HttpRequest) -> HttpResponse:
    """``/``: every job with its ETT%, the fleet's GPU-weighted ETT% and lost time by owner."""
    result = FleetQueryRunner(FleetQuery()).calculate()
    chart = ""
    if result.rows:
        fig = figures.fleet_lost_stacked([r.job for r in result.rows],
                                         [r.lost_by_component_s for r in result.rows],
                                         result.components)
        chart = figures.to_fragment(fig, "fleet-lost")
    return render(request, "dashboard/jobs.html", {"fleet": result, "chart": chart})


@login_required
@require_GET
def job_detail(request: HttpRequest, job: str) -> HttpResponse:
    """``/jobs/<job>/``: headline numbers, lost time by component and the phase timeline."""
    result = JobQueryRunner(JobQuery(job=job)).calculate()
    if result is None:
        raise Http404(f"no events for job {job!r}")
    attribution = result.attribution
    job_start = attribution.attempts[0].start if attribution.attempts else 0.0
    context: dict[str, Any] = {
        "result": result,
        "a": attribution,
        "lost_chart": figures.to_fragment(
            figures.lost_by_component_bar(result.lost_by_component_s), "lost-by-component"),
        "timeline": figures.to_fragment(
            figures.phase_timeline(attribution.segments, job_start), "phase-timeline"),
        "lost_rows": sorted(((c, s) for c, s in result.lost_by_component_s.items() if s > 0),
                            key=lambda kv: -kv[1]),
    }
    return render(request, "dashboard/job.html", context)


def _database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()


def _broker_status() -> str:
    try:
        with Connection(str(settings.CELERY_BROKER_URL), connect_timeout=BROKER_TIMEOUT_S) as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """``/healthz`` (no login): DB and broker status; 503 when either is down."""
    checks = {"database": _database_status(), "broker": _broker_status()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if healthy else "error", **checks},
                        status=200 if healthy else 503)
