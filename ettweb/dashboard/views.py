"""Thin views: run a query, build figures from its result, render a template."""

from __future__ import annotations

from datetime import date
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from ettweb.dashboard import job_page_figures
from ettweb.dashboard.forms import (
    JOBS_LIST_PARAMS,
    CollectorsFilterForm,
    JobPageForm,
    JobsFilterForm,
)
from ettweb.pages import figures, fleet_figures, trend_figures
from ettweb.pages.change_markers import mark_changes
from ettweb.pages.csv_tables import csv_response
from ettweb.pages.forms import ExportForm, FleetFilterForm
from ettweb.pages.parameters import bad_parameters, takes
from ettweb.queries import (
    HOUR_S,
    ChangesQuery,
    CollectorsQuery,
    DateRange,
    DetectedChange,
    FilterChoicesQuery,
    FleetHeadlineQuery,
    JobComputing,
    JobFilter,
    JobQuery,
    JobResult,
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
from ettweb.queries.base import LABELS
from ettweb.queries.job_detail import RETRY_AFTER_S
from ettweb.queries.job_detail import TABLES as JOB_TABLES
from ettweb.queries.job_list import SORTS as JOB_SORTS
from ettweb.queries.job_list import JobsQueryRunner

BROKER_TIMEOUT_S = 2


@login_required
@takes(JobsFilterForm)
@require_GET
def jobs(request: HttpRequest) -> HttpResponse:
    """``/``: one page of jobs, filtered and sorted, with the filtered set's GPU-weighted ETT%
    and lost time per component; ``format=csv`` exports every matching job."""
    form = JobsFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    if form.cleaned_data.get("format") == "csv":
        return _jobs_csv(form)
    result = calculate(form.query())
    if form.query().page > result.pages:
        return bad_page(form.query().page, result.pages)
    chart = ""
    if result.lost_by_component_gpu_s:
        hours = {c: s / HOUR_S for c, s in result.lost_by_component_gpu_s.items()}
        chart = figures.to_fragment(fleet_figures.lost_gpu_hours_bar(hours), "fleet-lost")
    sort = form.cleaned_data.get("sort") or "-lost_gpu_hours"
    return render(request, "dashboard/jobs.html", {
        "form": form, "fleet": result, "chart": chart, "sort": sort, "columns": JOB_LIST_COLUMNS,
        "sorted_key": sort.removeprefix("-"),
        "sorted_order": "descending" if sort.startswith("-") else "ascending",
        "sort_links": {key: form.link(sort=("" if sort == f"-{key}" else "-") + key, page="")
                       for key in JOB_SORTS},
        "previous": form.link(page=result.page - 1) if result.page > 1 else "",
        "next": form.link(page=result.page + 1) if result.page < result.pages else "",
        "csv": form.link(format="csv", page=""), "stale_link": form.link(status="stale", page="")})


#: The jobs table's columns: (sort key or "", heading, numeric).
JOB_LIST_COLUMNS = (("job", "Job", False), ("", "Model", False), ("", "Team", False),
                    ("", "Cluster", False), ("attempts", "Attempts", True),
                    ("", "Status", False), ("gpus", "GPUs", True), ("start", "Start (UTC)", False),
                    ("wall", "Wall", True), ("ett_pct", "ETT%", True),
                    ("lost_gpu_hours", "Lost GPU-hours", True), ("failures", "Failures", True),
                    ("", "Anomalies", True))


def bad_page(page: int, pages: int) -> HttpResponse:
    """A page past the last one is a 400 that says how many there are (it used to show the
    last page under the URL of one that does not exist)."""
    return HttpResponseBadRequest(f"bad parameters: page: {page} is past the last page, "
                                  f"{pages}", content_type="text/plain")


JOB_COLUMNS = ("job", "model", "team", "cluster", "status", "attempts", "gpus", "start",
               "wall_s", "ett_pct", "lost_gpu_hours", "failures", "anomalies", "last_heard",
               "stale")


def _jobs_csv(form: JobsFilterForm) -> HttpResponse:
    rows = JobsQueryRunner(form.query()).export()
    return csv_response("ett-jobs.csv", JOB_COLUMNS, (
        [r.job, r.model, r.team, r.cluster, r.status, r.attempts, r.gpus,
         r.start.isoformat() if r.start else "", r.wall_s, r.ett_pct, r.lost_gpu_hours,
         r.failures, r.anomalies, r.last_heard.isoformat() if r.last_heard else "",
         "true" if r.stale else "false"] for r in rows))


@login_required
@takes(JobPageForm)
@require_GET
def job_detail(request: HttpRequest, job: str) -> HttpResponse:
    """``/jobs/<job>/``: headline numbers, the category timeline and the rank lanes of one
    chunk per attempt (``lanes_at``: of the chunk holding that epoch second),
    the lost-time waterfall, recoveries and anomalies, all read from the job's stored rows
    (never its events); ``format=csv&table=attempts|recoveries`` exports a table."""
    export = JobPageForm(request.GET, JOB_TABLES)
    if not export.is_valid():
        return bad_parameters(export)
    result = calculate(JobQuery(job=job, lanes_at=export.cleaned_data.get("lanes_at")))
    if result is None:
        raise Http404(f"no events for job {job!r}")
    if isinstance(result, JobComputing):
        return _job_computing(request, result, export.table_wanted)
    table = export.table_wanted
    if table is not None:
        header, rows = result.table(table)
        return csv_response(f"ett-job-{table}.csv", header, rows)
    return render(request, "dashboard/job.html", {
        "result": result, "h": result.headline, "charts": job_page_figures.page_charts(result),
        "anomalies": sorted(result.headline.anomalies.items()),
        "lost_chart": figures.to_fragment(fleet_figures.lost_gpu_hours_bar(
            {c: s / HOUR_S for c, s in result.lost_by_component_gpu_s.items() if s > 0}),
            "lost-by-component"),
        "lost_rows": _lost_rows(result),
        "csv": {name: "?" + urlencode({"format": "csv", "table": name}) for name in JOB_TABLES},
        "stale_after_s": settings.ETT_STALE_AFTER_S,
    })


def _job_computing(request: HttpRequest, result: JobComputing,
                   table: str | None) -> HttpResponse:
    """A job the worker is computing: the page says so with what is known; a CSV export
    is a 503 with ``Retry-After``, so a script retries rather than saving the message."""
    if table is not None:
        response = HttpResponse(
            f"job {result.job!r} is being computed (its rollup is not stored yet); "
            f"try again in {RETRY_AFTER_S} s\n", status=503, content_type="text/plain")
    else:
        response = render(request, "dashboard/job_computing.html", {"result": result})
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _lost_rows(result: JobResult) -> list[tuple[str, float, float]]:
    """(component, lost GPU-seconds, lost wall seconds), largest first, none that lost
    nothing: the table beside the chart."""
    rows = [(c, gpu_s, result.lost_by_component_s.get(c, 0.0))
            for c, gpu_s in result.lost_by_component_gpu_s.items() if gpu_s > 0]
    return sorted(rows, key=lambda row: (-row[1], row[0]))


@login_required
@takes(FleetFilterForm, ExportForm)
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    """``/fleet/``: ETT% trend, lost GPU-hours by component, top jobs, restart tax, lifecycle,
    all of the jobs the filter keeps; ``format=csv&table=…`` exports one of its tables.

    Inputs come from GET parameters through :class:`FleetFilterForm`; bad ones are a 400
    that names the parameter and the problem, never a guess.
    """
    form = FleetFilterForm(request.GET)
    export = ExportForm(request.GET, FLEET_TABLES)
    for inputs in (form, export):
        if not inputs.is_valid():
            return bad_parameters(inputs)
    table = export.table_wanted
    if table is not None:
        return _fleet_csv(table, form.cleaned_data)
    return render(request, "dashboard/fleet.html", _fleet_context(form))


def _fleet_context(form: FleetFilterForm) -> dict[str, Any]:
    """Every query the overview shows, each narrowed by the same :class:`JobFilter`."""
    data = form.cleaned_data
    days, interval, jobs = data["range"], data["interval"], data["jobs"]
    trend_query = TrendQuery(days, interval, data["group_by"], jobs)
    trend = calculate(trend_query)
    earlier = trend_query.previous() if data["compare"] else None
    lost = calculate(LostByComponentQuery(days, jobs))
    lifecycle = calculate(LifecycleQuery(days, interval, jobs))
    markers = calculate(RolloutMarkersQuery(days, jobs=jobs)).markers
    changes = calculate(ChangesQuery(days.date_from, days.date_to, team=jobs.team)).changes
    over_time = calculate(LostTrendQuery(days, interval, jobs))
    charts = _fleet_charts(trend, lost.components, lifecycle, interval, markers, jobs, days,
                           _overlay(earlier, days), changes)
    if over_time.components:
        charts["lost_over_time"] = figures.to_fragment(fleet_figures.lost_over_time_stacked(
            over_time.periods, {c: [v / HOUR_S for v in values]
                                for c, values in over_time.gpu_s.items()},
            interval), "lost-over-time")
    return {
        "form": form.shown(), "range": days, "interval": interval, "jobs": jobs,
        "group_by": data["group_by"], "trend": trend, "lost": lost,
        "top": calculate(TopJobsQuery(days, jobs=jobs)), "lifecycle": lifecycle,
        "rollouts": len(markers), "charts": charts, "changes": changes,
        "previous": earlier.range if earlier is not None else None,
        "compare_unavailable": data["compare"] and earlier is None,
        "choices": calculate(FilterChoicesQuery()),
        "component_query": form.link("date_from", "date_to", "interval", *LABELS, "gpus"),
        "jobs_query": form.link(*JOBS_LIST_PARAMS),
        "clear_query": form.link("date_from", "date_to", "interval", "group_by", "compare"),
        "csv": {name: "?" + form.link(format="csv", table=name) for name in FLEET_TABLES},
        "headline": calculate(FleetHeadlineQuery(days, interval, jobs)),
    }


FLEET_TABLES = ("lost_by_component", "top_jobs", "lifecycle")


def _fleet_csv(table: str, data: dict[str, Any]) -> HttpResponse:
    """One of the overview's tables as CSV, with exactly the page's filter and numbers."""
    days, jobs = data["range"], data["jobs"]
    name = f"ett-fleet-{table}-{days.date_from}-{days.date_to}.csv"
    if table == "lost_by_component":
        components = calculate(LostByComponentQuery(days, jobs)).components
        return csv_response(name, ("component", "lost_gpu_hours", "categories"), (
            [c.component, c.gpu_hours, ", ".join(c.categories)] for c in components))
    if table == "top_jobs":
        top = calculate(TopJobsQuery(days, jobs=jobs)).jobs
        return csv_response(name, ("job", "lost_gpu_hours", "ett_pct", "gpus", "status", "team",
                                   "model", "cluster"), (
            [j.job, j.lost_gpu_hours, j.ett_pct, j.gpus, j.status, j.team, j.model, j.cluster]
            for j in top))
    points = calculate(LifecycleQuery(days, data["interval"], jobs)).points
    return csv_response(name, ("period", "jobs_started", "mean_time_to_start_s", "recoveries",
                               "mean_time_to_recover_s", "restart_tax_gpu_hours", "failures"), (
        [p.period.isoformat(), p.jobs_started, _blank(p.mean_time_to_start_s),
         p.recoveries, _blank(p.mean_time_to_recover_s), p.restart_tax_gpu_hours,
         p.failures] for p in points))


def _blank(value: float | None) -> float | str:
    """An absent mean as an empty cell, not the text ``None``."""
    return "" if value is None else value


def _trend_chart(trend: TrendResult, interval: str, markers: list[RolloutMarker],
                 jobs: JobFilter, days: DateRange,
                 previous: trend_figures.PreviousPeriod | None = None,
                 changes: list[DetectedChange] | None = None) -> str:
    """The ETT% trend, one line per group, the previous period dashed when asked for; a
    cluster of rollout markers links to the rollouts list with the page's filter; the
    detected changes of the range marked (ettweb.pages.change_markers)."""
    labels = {name: value for name, value in jobs.params().items() if name in LABELS}
    fig = trend_figures.ett_trend(_series(trend), interval, markers, previous, labels,
                                  days=days, reference=trend.ett_pct)
    mark_changes(fig, changes or [])
    return figures.to_fragment(fig, "ett-trend")


def _overlay(earlier: TrendQuery | None, days: DateRange) -> trend_figures.PreviousPeriod | None:
    """The previous period's trend (the query layer's shifted query), as the figure draws
    it onto ``days``; None when not asked for or before the first day."""
    if earlier is None:
        return None
    return trend_figures.PreviousPeriod(_series(calculate(earlier)), earlier.range.date_from,
                                        earlier.range.date_to,
                                        trend_figures.overlay_shift(days.days, earlier.interval))


#: Groups the trend draws as lines of their own; the rest become one "other" line.
TREND_LINES = 6


def _series(trend: TrendResult) -> dict[str, list[tuple[date, float]]]:
    """Each group's (period, ETT%) points, as the trend figure draws them: a period with no
    wall time has no ETT% (drawn as a gap, not as 0%)."""
    return {g: [(p.period, p.ett_pct) for p in points if p.wall_gpu_s > 0]
            for g, points in trend.folded(TREND_LINES).items()}


def _fleet_charts(trend: TrendResult, components: Any, lifecycle: LifecycleResult,
                  interval: str, markers: list[RolloutMarker], jobs: JobFilter,
                  days: DateRange, previous: trend_figures.PreviousPeriod | None,
                  changes: list[DetectedChange] | None = None) -> dict[str, str]:
    """The overview's figures as HTML fragments (empty when there is nothing to draw)."""
    charts: dict[str, str] = {}
    if trend.points:
        charts["trend"] = _trend_chart(trend, interval, markers, jobs, days, previous, changes)
    if components:
        hours = {c.component: c.gpu_hours for c in components}
        charts["lost"] = figures.to_fragment(fleet_figures.lost_gpu_hours_bar(hours),
                                             "lost-by-component")
    points = lifecycle.points
    if lifecycle.categories:
        tax = [{k: v / HOUR_S for k, v in p.restart_tax_gpu_s.items()} for p in points]
        charts["tax"] = figures.to_fragment(fleet_figures.restart_tax_stacked(
            [p.period for p in points], tax, lifecycle.categories, interval), "restart-tax")
    if points:
        charts["lifecycle"] = figures.to_fragment(fleet_figures.lifecycle_chart(
            [p.period for p in points], [p.mean_time_to_start_s for p in points],
            [p.mean_time_to_recover_s for p in points], [p.failures for p in points],
            interval), "lifecycle")
    return charts


@login_required
@takes(CollectorsFilterForm, ExportForm)
@require_GET
def collectors(request: HttpRequest) -> HttpResponse:
    """``/collectors/``: every agent's latest health (rejected and silent ones first and
    flagged) and the lines ingestion refused, with their reasons; ``format=csv&table=…``
    exports one of its tables (``collectors``, ``reasons``, ``rejected``) with the page's
    filter."""
    form = CollectorsFilterForm(request.GET)
    export = ExportForm(request.GET, COLLECTOR_TABLES)
    for inputs in (form, export):
        if not inputs.is_valid():
            return bad_parameters(inputs)
    data = form.cleaned_data
    table = export.table_wanted
    if table is not None:
        return _collectors_csv(table, data)
    result = calculate(CollectorsQuery(silent_after_s=data["silent_after_s"],
                                       source=data["source"]))
    return render(request, "dashboard/collectors.html", {
        "form": form.shown(), "result": result, "csv": _collectors_csv_links(data),
        "csv_rejected": CSV_REJECTED_LINES,
        "rejections_days": settings.ETT_COLLECTOR_REJECTIONS_DAYS})


COLLECTOR_TABLES = ("collectors", "reasons", "rejected")
#: Rejected lines in the CSV: the most the query returns (the page shows the newest 50).
CSV_REJECTED_LINES = 500
COLLECTOR_COLUMNS = ("source", "collector_id", "status", "silent_for_s", "last_report",
                     "last_shipped", "backlog_events", "backlog_bytes", "shipped_events",
                     "dropped_events", "corrupted_records", "spool_files", "rejected_lines",
                     "rejection_reason", "last_rejected")
REJECTED_COLUMNS = ("received_at", "source", "job", "reason", "lines", "line_start",
                    "line_bytes")


def _collectors_csv_links(data: dict[str, Any]) -> dict[str, str]:
    """Each table's CSV link, keeping the page's threshold and source."""
    kept = {"silent_after": data["silent_after_s"] // 60,
            **({"source": data["source"]} if data["source"] else {})}
    return {name: "?" + urlencode({**kept, "format": "csv", "table": name})
            for name in COLLECTOR_TABLES}


def _collectors_csv(table: str, data: dict[str, Any]) -> HttpResponse:
    """One of the collectors page's tables as CSV: the same query, the same filter. Sources,
    job names and rejected lines come from outside; ``csv_response`` neutralizes formulas."""
    result = calculate(CollectorsQuery(silent_after_s=data["silent_after_s"],
                                       rejected=CSV_REJECTED_LINES, source=data["source"]))
    if table == "collectors":
        return csv_response("ett-collectors.csv", COLLECTOR_COLUMNS, (
            [r.source, r.collector_id, r.status, round(r.silent_for_s, 1),
             r.last_seen.isoformat(), r.last_success.isoformat() if r.last_success else "",
             r.backlog_events, r.backlog_bytes, r.shipped_events, r.dropped_events,
             r.corrupted_records, r.spool_files, r.rejected_lines, r.rejection_reason,
             r.last_rejected.isoformat() if r.last_rejected else ""]
            for r in result.collectors))
    if table == "reasons":
        return csv_response("ett-rejection-reasons.csv", ("reason", "lines"),
                            ((r.reason, r.lines) for r in result.reasons))
    return csv_response("ett-rejected-lines.csv", REJECTED_COLUMNS, (
        [r.received_at.isoformat(), r.source, r.job, r.reason, r.lines, r.raw_preview,
         r.raw_bytes] for r in result.rejected))


def _database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()


def _broker_status() -> str:
    try:
        with Connection(str(settings.CELERY_BROKER_URL), password=settings.CELERY_BROKER_PASSWORD,
                        connect_timeout=BROKER_TIMEOUT_S) as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()


@never_cache
@takes()
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """``/healthz`` (no login): DB and broker status; 503 when either is down."""
    checks = {"database": _database_status(), "broker": _broker_status()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if healthy else "error", **checks},
                        status=200 if healthy else 503)


@takes()
@require_GET
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico`` (no login): the static icon, resolved per request because the
    production storage's hashed name is known only once ``collectstatic`` has run."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))
