"""``/changes/``: the detected level shifts, each with its rollout or a way to record one.

Thin view: inputs through :class:`ChangesFilterForm` (a bad one is a 400 naming it), numbers
through the query layer (``ChangesQuery``, what ``GET /api/v1/changes`` answers from).
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from ettweb.changes.forms import ChangesFilterForm
from ettweb.pages.parameters import bad_parameters, takes
from ettweb.queries import DetectedChange, FilterChoicesQuery, calculate
from ettweb.queries.changes import LIST_LIMIT, MATCH_DAYS
from ettweb.queries.components import component_names

#: Days either side of a change its component page link shows.
CONTEXT_DAYS = 30


@login_required
@takes(ChangesFilterForm)
@require_GET
def change_list(request: HttpRequest) -> HttpResponse:
    """Every detected change the filters keep, newest first: its rollout, or (for owners of
    its component and admins) a *Record a rollout* link prefilled with it."""
    form = ChangesFilterForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    result = calculate(form.cleaned_data["query"])
    return render(request, "changes/list.html", {
        "form": form, "result": result, "limit": LIST_LIMIT, "match_days": MATCH_DAYS,
        "rows": [(c, component_url(c), record_url(c)) for c in result.changes],
        "components": component_names(), "choices": calculate(FilterChoicesQuery())})


def record_url(change: DetectedChange) -> str:
    """The rollout form prefilled with the change: its component, its day (00:00 UTC) and,
    for a team's change, that team as the scope."""
    initial = {"component": change.component, "at": f"{change.day.isoformat()}T00:00"}
    if change.team:
        initial["teams"] = change.team
    return f"{reverse('rollouts:create')}?{urlencode(initial)}"


def component_url(change: DetectedChange) -> str:
    """The component's page around the change, filtered to its team: the lost-share chart
    there marks it."""
    params = {"date_from": (change.day - timedelta(days=CONTEXT_DAYS)).isoformat(),
              "date_to": (change.day + timedelta(days=CONTEXT_DAYS)).isoformat()}
    if change.team:
        params["team"] = change.team
    return f"{reverse('components:detail', args=[change.component])}?{urlencode(params)}"
