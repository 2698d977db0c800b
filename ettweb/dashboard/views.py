"""Thin views: run a query, build figures from its result, render a template."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from ettweb.dashboard import figures
from ettweb.dashboard.exports import csv_response
from ettweb.dashboard.forms import (
    CollectorsFilterForm,
    FleetFilterForm,
    JobsFilterForm,
    bad_parameters,
)
from ettweb.queries import (
    HOUR_S,
    CollectorsQuery,
    DateRange,
    JobQuery,
    LifecycleQuery,
    LifecycleResult,
    LostByComponentQuery,
    LostTrendQuery,
    RolloutMarker,
    RolloutMarkersQuery,
    TopJobsQuery,
    TrendQuery,
    TrendResult,
    calculate,
)
from ettweb.queries.base import FIRST_DAY
from ettweb.queries.jobs import SORTS as JOB_SORTS
from ettweb.queries.jobs import JobsQueryRunner

BROKER_TIMEOUT_S = 2


@login_required
@require_GET
def jobs(request: HttpRequest) -> HttpResponse:
    """``/``: one page of jobs, filtered and sorted, with the filtered set's GPU-weighted ETT%
    and lost time per component; ``format=csv`` exports every matching job."""
    form = JobsFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    if request.GET.get("format") == "csv":
        return _jobs_csv(form)
    result = calculate(form.query())
    chart = ""
    if result.lost_by_component_gpu_s:
        hours = {c: s / HOUR_S for c, s in result.lost_by_component_gpu_s.items()}
        chart = figures.to_fragment(figures.lost_gpu_hours_bar(hours), "fleet-lost")
    sort = form.cleaned_data.get("sort") or "-lost_gpu_hours"
    return render(request, "dashboard/jobs.html", {
        "form": form, "fleet": result, "chart": chart, "sort": sort,
        "sort_links": {key: form.link(sort=("" if sort == f"-{key}" else "-") + key, page="")
                       for key in JOB_SORTS},
        "previous": form.link(page=result.page - 1) if result.page > 1 else "",
        "next": form.link(page=result.page + 1) if result.page < result.pages else "",
        "csv": form.link(format="csv", page="")})


JOB_COLUMNS = ("job", "model", "team", "cluster", "status", "attempts", "gpus", "start",
               "wall_s", "ett_pct", "lost_gpu_hours", "failures", "anomalies")


def _jobs_csv(form: JobsFilterForm) -> HttpResponse:
    rows = JobsQueryRunner(form.query()).export()
    return csv_response("ett-jobs.csv", JOB_COLUMNS, (
        [r.job, r.model, r.team, r.cluster, r.status, r.attempts, r.gpus,
         r.start.isoformat() if r.start else "", r.wall_s, r.ett_pct, r.lost_gpu_hours,
         r.failures, r.anomalies] for r in rows))


@login_required
@require_GET
def job_detail(request: HttpRequest, job: str) -> HttpResponse:
    """``/jobs/<job>/``: headline numbers (the job's rollup), lost time by component, the
    phase timeline (the engine on this job's events) and its anomalies."""
    result = calculate(JobQuery(job=job))
    if result is None:
        raise Http404(f"no events for job {job!r}")
    attribution = result.attribution
    job_start = attribution.attempts[0].start if attribution.attempts else 0.0
    context: dict[str, Any] = {
        "result": result,
        "h": result.headline,
        "anomalies": sorted(result.headline.anomalies.items()),
        "lost_chart": figures.to_fragment(
            figures.lost_by_component_bar(result.lost_by_component_s), "lost-by-component"),
        "timeline": figures.to_fragment(
            figures.phase_timeline(attribution.segments, job_start), "phase-timeline"),
        "lost_rows": sorted(((c, s) for c, s in result.lost_by_component_s.items() if s > 0),
                            key=lambda kv: -kv[1]),
    }
    return render(request, "dashboard/job.html", context)


@login_required
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    """``/fleet/``: ETT% trend, lost GPU-hours by component, top jobs, restart tax, lifecycle.

    Inputs come from GET parameters through :class:`FleetFilterForm`; bad ones are a 400
    that names the parameter and the problem, never a guess.
    """
    form = FleetFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    data = form.cleaned_data
    trend = calculate(TrendQuery(data["range"], data["interval"], data["group_by"]))
    lost = calculate(LostByComponentQuery(data["range"]))
    top = calculate(TopJobsQuery(data["range"]))
    lifecycle = calculate(LifecycleQuery(data["range"], data["interval"]))
    markers = calculate(RolloutMarkersQuery(data["range"])).markers
    over_time = calculate(LostTrendQuery(data["range"], data["interval"]))
    charts = _fleet_charts(trend, lost.components, lifecycle, data["interval"], markers)
    if over_time.components:
        charts["lost_over_time"] = figures.to_fragment(figures.lost_over_time_stacked(
            over_time.periods, {c: [v / HOUR_S for v in values]
                                for c, values in over_time.gpu_s.items()},
            data["interval"]), "lost-over-time")
    context: dict[str, Any] = {
        "form": form.shown(), "range": data["range"], "interval": data["interval"],
        "group_by": data["group_by"], "trend": trend, "lost": lost, "top": top,
        "lifecycle": lifecycle, "rollouts": len(markers), "charts": charts,
        "headline": _headline(data["range"], trend, lost.lost_gpu_hours, lifecycle.failures),
    }
    return render(request, "dashboard/fleet.html", context)


def _headline(days: DateRange, trend: TrendResult, lost_gpu_hours: float,
              failures: int) -> dict[str, Any]:
    """The overview's tiles beyond the range's totals: the range's last 7 days against the 7
    before (points and relative), lost capacity in GPUs (lost GPU-hours / hours in the range)
    and failures per 1,000 GPU-hours."""
    last = DateRange(max(days.date_from, days.date_to - timedelta(days=6)), days.date_to)
    before_end = last.date_from - timedelta(days=1)
    before = (calculate(TrendQuery(DateRange(before_end - timedelta(days=6), before_end)))
              if before_end >= FIRST_DAY + timedelta(days=6) else None)
    this_week = calculate(TrendQuery(last))
    hours = ((days.date_to - days.date_from).days + 1) * 24
    wall_hours = trend.wall_gpu_s / HOUR_S
    change = (this_week.ett_pct - before.ett_pct
              if before is not None and before.wall_gpu_s and this_week.wall_gpu_s else None)
    return {"week": last, "week_ett": this_week.ett_pct if this_week.wall_gpu_s else None,
            "week_change_pts": change,
            "week_change_rel": (100 * change / before.ett_pct
                                if change is not None and before and before.ett_pct else None),
            "gpus_lost": lost_gpu_hours / hours,
            "failures_per_1k": 1000 * failures / wall_hours if wall_hours else None,
            "trend_change_pts": _net_change(trend)}


def _net_change(trend: TrendResult) -> float | None:
    """The whole fleet's ETT% in the range's last period minus its first (None if one)."""
    totals: dict[Any, list[float]] = {}
    for point in trend.points:
        wall_productive = totals.setdefault(point.period, [0.0, 0.0])
        wall_productive[0] += point.wall_gpu_s
        wall_productive[1] += point.productive_gpu_s
    with_data = [(period, v) for period, v in sorted(totals.items()) if v[0] > 0]
    if len(with_data) < 2:
        return None
    (_, first), (_, last) = with_data[0], with_data[-1]
    return 100 * last[1] / last[0] - 100 * first[1] / first[0]


def _fleet_charts(trend: TrendResult, components: Any, lifecycle: LifecycleResult,
                  interval: str, markers: list[RolloutMarker]) -> dict[str, str]:
    """The overview's figures as HTML fragments (empty when there is nothing to draw)."""
    charts: dict[str, str] = {}
    if trend.points:
        series = {g: [(p.period, p.ett_pct) for p in trend.series(g)] for g in trend.groups}
        charts["trend"] = figures.to_fragment(figures.ett_trend(series, interval, markers),
                                              "ett-trend")
    if components:
        hours = {c.component: c.gpu_hours for c in components}
        charts["lost"] = figures.to_fragment(figures.lost_gpu_hours_bar(hours),
                                             "lost-by-component")
    points = lifecycle.points
    if lifecycle.categories:
        tax = [{k: v / HOUR_S for k, v in p.restart_tax_gpu_s.items()} for p in points]
        charts["tax"] = figures.to_fragment(figures.restart_tax_stacked(
            [p.period for p in points], tax, lifecycle.categories, interval), "restart-tax")
    if points:
        charts["lifecycle"] = figures.to_fragment(figures.lifecycle_chart(
            [p.period for p in points], [p.mean_time_to_start_s for p in points],
            [p.mean_time_to_recover_s for p in points], [p.failures for p in points],
            interval), "lifecycle")
    return charts


@login_required
@require_GET
def collectors(request: HttpRequest) -> HttpResponse:
    """``/collectors/``: every agent's latest health (silent ones first and flagged) and the
    lines ingestion refused, with their reasons."""
    form = CollectorsFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    data = form.cleaned_data
    result = calculate(CollectorsQuery(silent_after_s=data["silent_after_s"],
                                       source=data["source"]))
    return render(request, "dashboard/collectors.html", {"form": form.shown(), "result": result})


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


@require_GET
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico`` (no login): the static icon, resolved per request because the
    production storage's hashed name is known only once ``collectstatic`` has run."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))
