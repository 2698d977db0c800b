"""Thin views for the component pages: validate inputs, run a query, build its figures."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from ettweb.components.forms import ComponentFilterForm, OwnerTeamForm
from ettweb.dashboard import figures
from ettweb.dashboard.forms import bad_parameters
from ettweb.queries import ComponentQuery, ComponentResult, ComponentsIndexQuery, calculate
from ettweb.queries.components import component_names
from ettweb.queries.impact import DEFAULT_WINDOW_DAYS


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """``/components/``: every component's lost GPU-hours, share of the fleet's lost time
    and owner team over the range."""
    form = ComponentFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    data = form.cleaned_data
    result = calculate(ComponentsIndexQuery(data["range"]))
    context = {"form": form.shown(), "range": data["range"], "result": result,
               "rows": [(row, figures.colour_of(row.name)) for row in result.rows]}
    return render(request, "components/index.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def detail(request: HttpRequest, name: str) -> HttpResponse:
    """``/components/<name>/``: one component's lost time over time, its top jobs and
    models, its rollouts with their impact; POST (staff only) sets its owner team."""
    if request.method == "POST":
        return _save_owner_team(request, name)
    form = ComponentFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    data = form.cleaned_data
    result = calculate(ComponentQuery(name, data["range"], data["interval"]))
    if result is None:
        raise Http404(f"no component {name!r}")
    context: dict[str, Any] = {
        "form": form.shown(), "range": data["range"], "interval": data["interval"], "c": result,
        "owner_form": OwnerTeamForm(initial={"owner_team": result.owner_team}),
        "charts": _charts(result, data["interval"]),
        "rollout_rows": [(r, figures.rollout_url(r.marker.id)) for r in result.rollouts],
        "window_days": DEFAULT_WINDOW_DAYS,
        "all_rollouts_url": figures.rollouts_list_url(name, data["range"].date_from,
                                                      data["range"].date_to),
    }
    return render(request, "components/detail.html", context)


def _save_owner_team(request: HttpRequest, name: str) -> HttpResponse:
    """Staff only (403 otherwise); an invalid value is a 400 naming the field. Redirects
    back to the page with its filters (a reload does not post again)."""
    if not request.user.is_staff:
        raise PermissionDenied("only staff users edit a component's owner team")
    if name not in component_names():
        raise Http404(f"no component {name!r}")
    form = OwnerTeamForm(request.POST)
    if not form.is_valid():
        reason = "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
        return HttpResponseBadRequest(f"bad owner team: {reason}", content_type="text/plain")
    form.save(name)
    query = request.GET.urlencode()
    return redirect(request.path + (f"?{query}" if query else ""))


def _charts(result: ComponentResult, interval: str) -> dict[str, str]:
    """Lost GPU-hours and lost share per period, each with the component's rollout lane."""
    if not result.points:
        return {}
    lost = [(p.period, p.lost_gpu_hours) for p in result.points]
    share = [(p.period, p.lost_share_pts) for p in result.points]
    return {
        "lost": figures.to_fragment(figures.component_lost_chart(
            lost, result.name, interval, result.markers), "component-lost"),
        "share": figures.to_fragment(figures.component_share_chart(
            share, result.name, interval, result.markers), "component-share"),
    }
