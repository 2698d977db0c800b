"""Thin views for the component pages: validate inputs, run a query, build its figures."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from ettweb.access.roles import can_edit_component, require
from ettweb.components import phase_map
from ettweb.components.forms import ComponentFilterForm, OwnerTeamForm
from ettweb.pages import figures, fleet_figures, rollout_lanes, trend_figures
from ettweb.pages.change_markers import mark_changes
from ettweb.pages.csv_tables import csv_response
from ettweb.pages.forms import ExportForm
from ettweb.pages.parameters import bad_parameters, takes
from ettweb.platform.colours import colour_of
from ettweb.queries import (
    ChangesQuery,
    ComponentQuery,
    ComponentResult,
    ComponentsIndexQuery,
    ComponentsIndexResult,
    DateRange,
    DetectedChange,
    FilterChoicesQuery,
    calculate,
)
from ettweb.queries.base import LABELS, MAX_RANGE_DAYS
from ettweb.queries.components import ComponentRollout, RolloutsOutside, component_names
from ettweb.queries.impact import DEFAULT_WINDOW_DAYS

#: The tables each page exports as CSV (``?format=csv&table=<name>``).
INDEX_TABLES = ("components",)
DETAIL_TABLES = ("top_jobs", "top_models", "rollouts")


def _inputs(request: HttpRequest,
            tables: tuple[str, ...]) -> tuple[ComponentFilterForm, str | None] | HttpResponse:
    """The page's filter and the table to export (None: the page), or the 400 that names
    the bad parameter."""
    form = ComponentFilterForm(request.GET)
    export = ExportForm(request.GET, tables)
    for inputs in (form, export):
        if not inputs.is_valid():
            return bad_parameters(inputs)
    return form, export.table_wanted


def _page_context(form: ComponentFilterForm) -> dict[str, Any]:
    """What both pages show around their numbers: the filter's inputs and values, and the
    query string that keeps it on the link to the index."""
    data = form.cleaned_data
    return {"form": form.shown(), "range": data["range"], "jobs": data["jobs"],
            "choices": calculate(FilterChoicesQuery()),
            "index_query": form.link("date_from", "date_to", *LABELS, "gpus")}


def _csv_links(form: ComponentFilterForm, tables: tuple[str, ...]) -> dict[str, str]:
    return {name: "?" + form.link(format="csv", table=name) for name in tables}


@login_required
@takes(ComponentFilterForm, ExportForm)
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """``/components/``: every component's lost GPU-hours, share of the (filtered) fleet's
    lost time, owner team and owners over the range; ``format=csv&table=components`` exports it."""
    inputs = _inputs(request, INDEX_TABLES)
    if isinstance(inputs, HttpResponse):
        return inputs
    form, table = inputs
    data = form.cleaned_data
    result = calculate(ComponentsIndexQuery(data["range"], data["jobs"], data["interval"]))
    if table is not None:
        return _index_csv(result, data["range"])
    chart = ""
    if result.periods and result.lost_share_pts:
        chart = figures.to_fragment(fleet_figures.lost_share_lines(
            result.periods, result.lost_share_pts, data["interval"]), "components-share")
    context = {**_page_context(form), "result": result, "chart": chart,
               "interval": data["interval"],
               "rows": [(row, colour_of(row.name)) for row in result.components],
               "csv": _csv_links(form, INDEX_TABLES)}
    return render(request, "components/index.html", context)


def _index_csv(result: ComponentsIndexResult, days: DateRange) -> HttpResponse:
    return csv_response(f"ett-components-{days.date_from}-{days.date_to}.csv", (
        "component", "owner_team", "lost_gpu_hours", "share_of_fleet_lost_pct",
        "lost_share_pts", "rollouts", "owners"), (
        [r.name, r.owner_team, r.lost_gpu_hours, r.share_of_fleet_lost_pct, r.lost_share_pts,
         r.rollouts, ", ".join(o.username for o in r.owners)] for r in result.components))


@login_required
@takes(ComponentFilterForm, ExportForm)
@require_http_methods(["GET", "POST"])
def detail(request: HttpRequest, name: str) -> HttpResponse:
    """``/components/<name>/``: one component's lost time over time, its top jobs and
    models, its rollouts with their impact; POST (staff only) sets its owner team."""
    if request.method == "POST":
        return _save_owner_team(request, name)
    return _detail_page(request, name)


def _detail_page(request: HttpRequest, name: str) -> HttpResponse:
    """The GET side of ``detail``: the page, or one of its tables as CSV
    (``format=csv&table=top_jobs|top_models|rollouts``), of the filtered jobs."""
    inputs = _inputs(request, DETAIL_TABLES)
    if isinstance(inputs, HttpResponse):
        return inputs
    form, table = inputs
    data = form.cleaned_data
    result = calculate(ComponentQuery(name, data["range"], data["interval"], jobs=data["jobs"]))
    if result is None:
        raise Http404(f"no component {name!r}")
    if table is not None:
        return _detail_csv(result, table, data["range"])
    labels = {k: v for k, v in data["jobs"].params().items() if k in LABELS}
    changes = calculate(ChangesQuery(data["range"].date_from, data["range"].date_to, name,
                                     data["jobs"].team)).changes
    context: dict[str, Any] = {
        **_page_context(form), "interval": data["interval"], "c": result,
        "owner_form": OwnerTeamForm(initial={"owner_team": result.owner_team}),
        "charts": _charts(result, data["interval"], labels, changes, data["range"]),
        "changes": changes,
        "rollout_rows": [(r, rollout_lanes.rollout_url(r.marker.id)) for r in result.rollouts],
        "window_days": DEFAULT_WINDOW_DAYS, "csv": _csv_links(form, DETAIL_TABLES),
        "all_rollouts_url": rollout_lanes.rollouts_list_url(name, data["range"].date_from,
                                                            data["range"].date_to, labels),
        "outside_url": _covering_link(form, result.rollouts_outside_range),
    }
    return render(request, "components/detail.html", context)


def _covering_link(form: ComponentFilterForm, outside: RolloutsOutside) -> str:
    """This page over a range that also holds the component's rollouts outside the shown
    one (the newest kept when a range that long would pass the longest one allowed), with
    the same filter and interval; empty when every rollout is inside."""
    if not outside.count or outside.first is None or outside.last is None:
        return ""
    shown: DateRange = form.cleaned_data["range"]
    first, last = min(outside.first, shown.date_from), max(outside.last, shown.date_to)
    first = max(first, last - timedelta(days=MAX_RANGE_DAYS - 1))
    return "?" + form.link("interval", *LABELS, "gpus", date_from=first.isoformat(),
                           date_to=last.isoformat())


def _detail_csv(result: ComponentResult, table: str, days: DateRange) -> HttpResponse:
    """One of the component page's tables, the page's numbers unrounded."""
    name = f"ett-{result.name}-{table}-{days.date_from}-{days.date_to}.csv"
    if table == "top_jobs":
        return csv_response(name, ("job", "lost_gpu_hours", "lost_share_pts", "gpus", "model",
                                   "team"), (
            [j.job, j.lost_gpu_hours, j.lost_share_pts, j.gpus, j.model, j.team]
            for j in result.top_jobs))
    if table == "top_models":
        return csv_response(name, ("model", "lost_gpu_hours", "jobs"), (
            [m.model, m.lost_gpu_hours, m.jobs] for m in result.top_models))
    return csv_response(name, ("id", "rollout", "at", "scope", "change_pts", "ci95_low_pts",
                               "ci95_high_pts", "did_pts", "verdict", "component_change_pts",
                               "component_ci95_low_pts", "component_ci95_high_pts",
                               "component_verdict", "adjusted_change_pts",
                               "adjusted_ci95_low_pts", "adjusted_ci95_high_pts",
                               "adjusted_verdict"), (
        _rollout_cells(r) for r in result.rollouts))


def _rollout_cells(row: ComponentRollout) -> list[object]:
    """§6's unadjusted numbers, then the headline the page shows (the rollouts CSV's
    columns)."""
    impact, marker, h = row.impact, row.marker, row.headline
    treated = impact.treated if impact else None
    interval = treated.ci95_pts if treated and treated.ci95_pts else ("", "")
    component = h.component_ci95_pts if h and h.component_ci95_pts else ("", "")
    adjusted = h.adjusted_ci95_pts if h and h.adjusted_ci95_pts else ("", "")
    return [marker.id, marker.name, marker.at.isoformat(), marker.scope,
            _blank(treated.change_pts if treated else None), interval[0], interval[1],
            _blank(impact.did_pts if impact else None), impact.verdict if impact else "",
            _blank(h.component_change_pts if h else None), *component,
            h.component_verdict if h else "", _blank(h.adjusted_change_pts if h else None),
            *adjusted, h.adjusted_verdict if h else ""]


def _blank(value: float | None) -> float | str:
    return "" if value is None else value


def _save_owner_team(request: HttpRequest, name: str) -> HttpResponse:
    """The component's owners and admins only (403 with the reason otherwise); an invalid
    value is a 400 naming the field. Redirects back to the page with its filters (a reload
    does not post again)."""
    if name not in component_names():
        raise Http404(f"no component {name!r}")
    require(can_edit_component(request.user, name), request.user,
            f"change the owner team of {name}")
    form = OwnerTeamForm(request.POST)
    if not form.is_valid():
        reason = "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
        return HttpResponseBadRequest(f"bad owner team: {reason}", content_type="text/plain")
    form.save(name)
    query = request.GET.urlencode()
    return redirect(request.path + (f"?{query}" if query else ""))


@login_required
@takes("moved")
@require_http_methods(["GET", "POST"])
def phases(request: HttpRequest, name: str) -> HttpResponse:
    """``/components/<name>/phases/``: the categories the phase map gives ``name`` and the
    moves recorded to and from it; an owner moves a category only between components they
    own, an admin anywhere (POST, CSRF-checked; 403 with the reason otherwise)."""
    if name not in phase_map.components():
        raise Http404(f"no component {name!r}")
    editable = can_edit_component(request.user, name)
    if request.method == "POST":
        require(editable, request.user, f"change the phase map of {name}")
        form = phase_map.ReassignForm(name, request.POST)
        if not form.is_valid():
            return HttpResponseBadRequest(f"bad phase map change: {form.reason()}",
                                          content_type="text/plain")
        target = form.cleaned_data["component"]
        require(can_edit_component(request.user, target), request.user,
                f"move {form.cleaned_data['category']} to {target}")
        moved = form.save(request.user)
        return redirect(f"{request.path}?{urlencode({'moved': moved.phase})}")
    return render(request, "components/phases.html", {
        "name": name, "categories": phase_map.categories_of(name), "editable": editable,
        "targets": [c for c in phase_map.components() if can_edit_component(request.user, c)],
        "moves": phase_map.moves_of(name), "moved": request.GET.get("moved", "")})


def _charts(result: ComponentResult, interval: str, filters: dict[str, str],
            changes: list[DetectedChange], days: DateRange) -> dict[str, str]:
    """Lost GPU-hours and lost share per period, each with the component's rollout lane (a
    cluster's link keeps the page's model, team and cluster); the share chart marks the
    detected changes of its lost share (ettweb.pages.change_markers)."""
    if not result.points:
        return {}
    lost = [(p.period, p.lost_gpu_hours) for p in result.points]
    shares = [(p.period, p.lost_share_pts) for p in result.points]
    share = trend_figures.component_share_chart(shares, result.name, interval, result.markers,
                                                filters, days)
    mark_changes(share, changes)
    return {
        "lost": figures.to_fragment(trend_figures.component_lost_chart(
            lost, result.name, interval, result.markers, filters, days), "component-lost"),
        "share": figures.to_fragment(share, "component-share"),
    }
