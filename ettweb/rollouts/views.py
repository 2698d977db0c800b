"""Rollout pages: the list, the owners' create/edit form and one rollout's measured impact.

Thin views: inputs through forms (a bad parameter is a 400 that names it), numbers through
the query layer (``ImpactQuery``, the same runner the API answers from), pictures from
``ettweb.rollouts.figures``.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from ettweb.access.roles import can_edit_component, can_edit_rollout, can_record_rollouts, require
from ettweb.components.known import known_components
from ettweb.pages.csv_tables import csv_response
from ettweb.pages.figures import to_fragment
from ettweb.pages.forms import ExportForm
from ettweb.pages.parameters import bad_parameters, takes
from ettweb.queries import FilterChoicesQuery, ImpactQuery, RolloutListResult, calculate
from ettweb.queries.impact import ImpactResult
from ettweb.queries.markers import LIST_LIMIT, LIST_WINDOW_DAYS, RolloutRow
from ettweb.rollouts import figures
from ettweb.rollouts.forms import (
    ImpactWindowForm,
    RolloutForm,
    RolloutListForm,
)
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.validation import save_rollout
from ettweb.rollouts.warm import WARM_WINDOWS


@login_required
@takes(RolloutListForm, ExportForm)
@require_GET
def rollout_list(request: HttpRequest) -> HttpResponse:
    """``/rollouts/``: every rollout, newest first, filterable by component, days and the
    model, team and cluster its scope can reach; ``format=csv&table=rollouts`` exports the
    list."""
    form = RolloutListForm(request.GET)
    export = ExportForm(request.GET, ("rollouts",))
    for inputs in (form, export):
        if not inputs.is_valid():
            return bad_parameters(inputs)
    result = calculate(form.cleaned_data["query"])
    if export.table_wanted is not None:
        return _list_csv(result)
    return render(request, "rollouts/list.html", {
        "form": form, "result": result, "limit": LIST_LIMIT, "components": known_components(),
        "sort_links": _sort_links(form), "sort": form.cleaned_data.get("sort") or "-at",
        "list_window": LIST_WINDOW_DAYS,
        "choices": calculate(FilterChoicesQuery()), "csv": "?" + form.link(format="csv",
                                                                           table="rollouts"),
        "component_query": urlencode(form.cleaned_data["jobs"].params())})


def _sort_links(form: RolloutListForm) -> dict[str, str]:
    """Per sortable column, the link that sorts by it (again: the other way round)."""
    current = form.cleaned_data.get("sort") or "-at"
    links = {}
    for column, first in (("at", "-at"), ("ett_change", "-ett_change"),
                          ("component_change", "component_change")):
        flipped = first[1:] if first.startswith("-") else "-" + first
        links[column] = "?" + form.link(sort=flipped if current == first else first)
    return links


def _headline_cells(row: RolloutRow) -> list[object]:
    h = row.headline
    if h is None:
        return ["", "", "", "", "", "", "", ""]
    c_ci, a_ci = h.component_ci95_pts or (None, None), h.adjusted_ci95_pts or (None, None)
    return [h.component_verdict, h.component_change_pts, c_ci[0], c_ci[1],
            h.adjusted_verdict, h.adjusted_change_pts, a_ci[0], a_ci[1]]


def _list_csv(result: RolloutListResult) -> HttpResponse:
    """The list as CSV: the page's rows (in the page's order, up to its limit), with the
    stored 14-day verdicts."""
    return csv_response("ett-rollouts.csv", (
        "id", "at", "name", "component", "scope", "created_by", "simulated", "link",
        "component_verdict", "component_change_pts", "component_ci_low", "component_ci_high",
        "ett_verdict", "ett_change_pts", "ett_ci_low", "ett_ci_high"), (
        [r.marker.id, r.marker.at.isoformat(), r.marker.name, r.marker.component,
         r.marker.scope, r.created_by, r.simulated, r.marker.link, *_headline_cells(r)]
        for r in result.rows))


@login_required
@takes(RolloutForm)
@require_http_methods(["GET", "POST"])
def rollout_create(request: HttpRequest) -> HttpResponse:
    """``/rollouts/new/``: the form a person uses when no pipeline recorded the rollout;
    owners record rollouts of their components, admins of any (403 with the reason). GET
    parameters named like the form's fields prefill it (the changes page's *Record a
    rollout* link: component, day, team)."""
    require(can_record_rollouts(request.user), request.user, "record rollouts")
    initial = {k: v for k, v in request.GET.items() if k in RolloutForm.base_fields}
    form = RolloutForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid() and form.rollout_fields:
        component = form.rollout_fields.component
        require(can_edit_component(request.user, component), request.user,
                f"record a rollout of {component}")
        rollout = save_rollout(form.rollout_fields, created_by=request.user)
        return redirect("rollouts:detail", rollout_id=rollout.pk)
    return render(request, "rollouts/form.html", {"form": form, "rollout": None})


@login_required
@takes()
@require_http_methods(["GET", "POST"])
def rollout_edit(request: HttpRequest, rollout_id: int) -> HttpResponse:
    """``/rollouts/<id>/edit/``: fix a name, a scope or a time; impact follows at once.
    Owners of its component and admins only; an owner cannot move it to a component they
    do not own (that would hand their change to someone else's numbers)."""
    rollout = get_object_or_404(Rollout, pk=rollout_id)
    require(can_edit_rollout(request.user, rollout), request.user,
            f"edit a rollout of {rollout.component}")
    form = RolloutForm(request.POST or None, initial=RolloutForm.initial_for(rollout))
    if request.method == "POST" and form.is_valid() and form.rollout_fields:
        component = form.rollout_fields.component
        require(can_edit_component(request.user, component), request.user,
                f"move a rollout to {component}")
        save_rollout(form.rollout_fields, rollout=rollout)
        return redirect("rollouts:detail", rollout_id=rollout.pk)
    return render(request, "rollouts/form.html", {"form": form, "rollout": rollout})


@login_required
@takes(ImpactWindowForm)
@require_GET
def rollout_detail(request: HttpRequest, rollout_id: int) -> HttpResponse:
    """``/rollouts/<id>/?window=14``: the measured impact, as the API reports it."""
    form = ImpactWindowForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    result = calculate(ImpactQuery(rollout_id, form.window_days(), with_trend=True))
    if result is None:
        raise Http404(f"no rollout {rollout_id}")
    return render(request, "rollouts/detail.html", {
        "r": result, "form": form, "window": result.window_days,
        "standard_windows": WARM_WINDOWS,
        "moved": result.moved_components(), "charts": _charts(result)})


def _charts(result: ImpactResult) -> dict[str, str]:
    """The page's figures as HTML fragments; none when no treated job has data."""
    if not result.has_jobs:
        return {}
    charts = {"trend": to_fragment(figures.trend(result), "impact-trend"),
              "distributions": to_fragment(figures.distributions(result), "job-distributions")}
    if result.treated.change_pts is not None:
        charts["intervals"] = to_fragment(figures.change_intervals(result), "change-intervals")
    moved = result.moved_components()
    if moved:
        charts["components"] = to_fragment(figures.component_shifts(moved),
                                           "component-shifts")
    return charts
