"""Rollout pages: the list, the staff create/edit form and one rollout's measured impact.

Thin views: inputs through forms (a bad parameter is a 400 that names it), numbers through
the query layer (``ImpactQuery``, the same runner the API answers from), pictures from
``ettweb.rollouts.figures``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from ettweb.dashboard.figures import to_fragment
from ettweb.dashboard.forms import bad_parameters
from ettweb.queries import ImpactQuery, calculate
from ettweb.queries.impact import ImpactResult
from ettweb.rollouts import figures
from ettweb.rollouts.forms import (
    ImpactWindowForm,
    RolloutForm,
    RolloutListForm,
)
from ettweb.rollouts.logic import save_rollout
from ettweb.rollouts.models import Rollout

View = Callable[..., HttpResponse]
LIST_LIMIT = 500


def staff_required(view: View) -> View:
    """Logged-in staff only: others get a 403 (roles come with the dashboard's access rules)."""
    @wraps(view)
    @login_required
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("only staff may create or edit rollouts")
        return view(request, *args, **kwargs)
    return wrapped


@login_required
@require_GET
def rollout_list(request: HttpRequest) -> HttpResponse:
    """``/rollouts/``: every rollout, newest first, filterable by component and days."""
    form = RolloutListForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    data = form.cleaned_data
    rows = Rollout.objects.select_related("created_by").order_by("-at", "-id")
    if data.get("component"):
        rows = rows.filter(component=data["component"])
    if data.get("date_from"):
        rows = rows.filter(at__date__gte=data["date_from"])
    if data.get("date_to"):
        rows = rows.filter(at__date__lte=data["date_to"])
    total = rows.count()
    return render(request, "rollouts/list.html", {
        "rollouts": list(rows[:LIST_LIMIT]), "total": total, "limit": LIST_LIMIT,
        "filters": data})


@staff_required
@require_http_methods(["GET", "POST"])
def rollout_create(request: HttpRequest) -> HttpResponse:
    """``/rollouts/new/``: the form a person uses when no pipeline recorded the rollout."""
    form = RolloutForm(request.POST or None)
    if request.method == "POST" and form.is_valid() and form.rollout_fields:
        rollout = save_rollout(form.rollout_fields, created_by=request.user)
        return redirect("rollouts:detail", rollout_id=rollout.pk)
    return render(request, "rollouts/form.html", {"form": form, "rollout": None})


@staff_required
@require_http_methods(["GET", "POST"])
def rollout_edit(request: HttpRequest, rollout_id: int) -> HttpResponse:
    """``/rollouts/<id>/edit/``: fix a name, a scope or a time; impact follows at once."""
    rollout = get_object_or_404(Rollout, pk=rollout_id)
    form = RolloutForm(request.POST or None, initial=RolloutForm.initial_for(rollout))
    if request.method == "POST" and form.is_valid() and form.rollout_fields:
        save_rollout(form.rollout_fields, rollout=rollout)
        return redirect("rollouts:detail", rollout_id=rollout.pk)
    return render(request, "rollouts/form.html", {"form": form, "rollout": rollout})


@login_required
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
