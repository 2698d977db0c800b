"""The dashboard's own GET-parameter forms: the jobs list, one job's page and the collectors
page (the filter forms every page shares are in :mod:`ettweb.pages.forms`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms

from ettweb.pages.fields import day_field, gpus_field, label_field
from ettweb.pages.forms import ExportForm
from ettweb.queries import JobsQuery
from ettweb.queries.base import LABELS, one_sided_range
from ettweb.queries.collectors import DEFAULT_SILENT_AFTER_S
from ettweb.queries.job_list import MAX_PAGE_SIZE, MAX_SEARCH_CHARS
from ettweb.queries.job_list import SORTS as JOB_SORTS
from ettweb.queries.job_list import STATUSES as JOB_STATUSES

#: The parameters a link to the jobs list keeps: its own names for the same filter.
JOBS_LIST_PARAMS = ("date_from", "date_to", *LABELS, "gpus")


class JobPageForm(ExportForm):
    """The job page's inputs: an export (:class:`ExportForm`) and ``lanes_at``, the epoch
    second whose chunk of the timeline the per-rank lanes show (default: each attempt's
    first chunk)."""

    lanes_at = forms.FloatField(required=False, min_value=0.0, max_value=1e11,
                                help_text="epoch seconds: show the rank lanes of this chunk")


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

    q = forms.CharField(required=False, max_length=MAX_SEARCH_CHARS, label="Job")
    date_from = day_field()
    date_to = day_field()
    model = label_field("models")
    team = label_field("teams")
    cluster = label_field("clusters")
    gpus = gpus_field()
    status = forms.ChoiceField(required=False, choices=[("", "any")] + [
        (s, s) for s in JOB_STATUSES])
    sort = forms.ChoiceField(required=False, choices=[
        (f"{sign}{key}", f"{key} {'↓' if sign else '↑'}") for key in JOB_SORTS
        for sign in ("-", "")])
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    page_size = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)
    format = forms.ChoiceField(required=False, choices=[("csv", "csv")],
                               help_text="csv: every matching job as CSV")

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
