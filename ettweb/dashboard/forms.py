"""GET-parameter forms: a page's inputs are validated before any query runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import HttpResponse, HttpResponseBadRequest

from ettweb.queries import GPU_BUCKETS, GROUPINGS, INTERVALS, DateRange, JobsQuery, default_range
from ettweb.queries.base import one_sided_range
from ettweb.queries.collectors import DEFAULT_SILENT_AFTER_S
from ettweb.queries.jobs import MAX_PAGE_SIZE
from ettweb.queries.jobs import SORTS as JOB_SORTS
from ettweb.queries.jobs import STATUSES as JOB_STATUSES

DEFAULT_DAYS = 30
#: How days travel in GET parameters and how ``<input type="date">`` submits them.
ISO_DAY = "%Y-%m-%d"
GROUP_LABELS = {"none": "whole fleet", "model": "model", "team": "team", "cluster": "cluster",
                "gpus": "GPU-size bucket"}


def day_field() -> forms.DateField:
    """An optional UTC day in a GET parameter (``YYYY-MM-DD``), rendered as
    ``<input type="date">``. Why: a plain text box gave no picker and no hint of the format
    it wants; the browser's picker submits exactly ``YYYY-MM-DD``, and a hand-typed bad
    value stays a 400 naming the parameter."""
    return forms.DateField(required=False, input_formats=[ISO_DAY],
                           widget=forms.DateInput(attrs={"type": "date"}, format=ISO_DAY))


class FleetFilterForm(forms.Form):
    """Fleet overview inputs; every field is optional and defaults to the last 30 data days."""

    date_from = day_field()
    date_to = day_field()
    interval = forms.ChoiceField(required=False, choices=[(i, i) for i in INTERVALS])
    group_by = forms.ChoiceField(required=False,
                                 choices=[(g, GROUP_LABELS[g]) for g in GROUPINGS])

    def clean(self) -> dict[str, Any]:
        """Fill defaults and build the :class:`DateRange` (its own checks become form errors)."""
        data = super().clean() or {}
        if self.errors:
            return data
        fallback = default_range(DEFAULT_DAYS)
        date_to = data.get("date_to") or fallback.date_to
        date_from = data.get("date_from") or date_to - timedelta(days=DEFAULT_DAYS - 1)
        try:
            data["range"] = DateRange(date_from, date_to)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        data["interval"] = data.get("interval") or "day"
        data["group_by"] = data.get("group_by") or "none"
        return data

    def shown(self) -> FleetFilterForm:
        """The same form bound to the values the page used, defaults filled in, so the
        inputs show the range on screen rather than stay empty (a subclass gets its own
        class back; values for fields it dropped are ignored)."""
        data = self.cleaned_data
        return type(self)({"date_from": data["range"].date_from.isoformat(),
                           "date_to": data["range"].date_to.isoformat(),
                           "interval": data["interval"], "group_by": data["group_by"]})


def form_reason(form: forms.Form) -> str:
    """All errors on one line, naming the parameter: what a 400 response says."""
    parts = []
    for name, errors in form.errors.items():
        label = "parameters" if name == "__all__" else name
        parts.append(f"{label}: {' '.join(str(e) for e in errors)}")
    return "; ".join(parts)


def bad_parameters(form: forms.Form) -> HttpResponse:
    """The 400 every page answers for bad GET parameters: ``bad parameters: <reasons>``."""
    return HttpResponseBadRequest(f"bad parameters: {form_reason(form)}",
                                  content_type="text/plain")


class CollectorsFilterForm(forms.Form):
    """Collectors page inputs: the silence threshold (minutes, as people think of it) and
    an optional source."""

    silent_after = forms.IntegerField(required=False, min_value=1, max_value=7 * 24 * 60,
                                      help_text="minutes without a health report")
    source = forms.CharField(required=False, max_length=200)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors:
            minutes = data.get("silent_after")
            data["silent_after_s"] = (DEFAULT_SILENT_AFTER_S if minutes is None
                                      else int(minutes) * 60)
            data["source"] = (data.get("source") or "").strip()
        return data

    def shown(self) -> CollectorsFilterForm:
        data = self.cleaned_data
        return CollectorsFilterForm({"silent_after": data["silent_after_s"] // 60,
                                     "source": data["source"]})


class JobsFilterForm(forms.Form):
    """The jobs list's inputs: all optional; a range keeps jobs whose window overlaps it."""

    q = forms.CharField(required=False, max_length=200, label="Job")
    date_from = day_field()
    date_to = day_field()
    model = forms.CharField(required=False, max_length=200,
                            widget=forms.TextInput(attrs={"list": "models"}))
    team = forms.CharField(required=False, max_length=200,
                           widget=forms.TextInput(attrs={"list": "teams"}))
    cluster = forms.CharField(required=False, max_length=200,
                              widget=forms.TextInput(attrs={"list": "clusters"}))
    gpus = forms.ChoiceField(required=False, label="GPUs", choices=[("", "any")] + [
        (label, label) for _, _, label in GPU_BUCKETS])
    status = forms.ChoiceField(required=False, choices=[("", "any")] + [
        (s, s) for s in JOB_STATUSES])
    sort = forms.ChoiceField(required=False, choices=[
        (f"{sign}{key}", f"{key} {'↓' if sign else '↑'}") for key in JOB_SORTS
        for sign in ("-", "")])
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    page_size = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        data["range"] = None
        try:
            data["range"] = one_sided_range(data.get("date_from"), data.get("date_to"))
        except (ValueError, OverflowError) as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    def query(self, **overrides: Any) -> JobsQuery:
        """The :class:`JobsQuery` these inputs ask for (``overrides`` for the CSV export)."""
        data = self.cleaned_data
        fields: dict[str, Any] = {
            "range": data["range"], "search": data.get("q") or "",
            "model": data.get("model") or "", "team": data.get("team") or "",
            "cluster": data.get("cluster") or "", "gpus": data.get("gpus") or "",
            "status": data.get("status") or "", "sort": data.get("sort") or "-lost_gpu_hours",
            "page": data.get("page") or 1, "page_size": data.get("page_size") or 50}
        return JobsQuery(**{**fields, **overrides})

    def link(self, **changes: Any) -> str:
        """This view's query string with ``changes`` (a sort or a page), others kept."""
        params = {k: v for k, v in self.data.items() if v not in ("", None)}
        params.update({k: v for k, v in changes.items()})
        return "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})
