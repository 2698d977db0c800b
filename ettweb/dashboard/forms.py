"""GET-parameter forms: a page's inputs are validated before any query runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import HttpResponse, HttpResponseBadRequest

from ettweb.queries import GPU_BUCKETS, GROUPINGS, INTERVALS, JobFilter, JobsQuery
from ettweb.queries.base import (
    DEFAULT_DAYS,
    FIRST_DAY,
    LABELS,
    LAST_DAY,
    MAX_LABEL_CHARS,
    one_sided_range,
    range_or_default,
)
from ettweb.queries.collectors import DEFAULT_SILENT_AFTER_S
from ettweb.queries.job_list import MAX_PAGE_SIZE
from ettweb.queries.job_list import SORTS as JOB_SORTS
from ettweb.queries.job_list import STATUSES as JOB_STATUSES

#: How days travel in GET parameters and how ``<input type="date">`` submits them.
ISO_DAY = "%Y-%m-%d"
GROUP_LABELS = {"none": "whole fleet", "model": "model", "team": "team", "cluster": "cluster",
                "gpus": "GPU-size bucket"}


def _within_days(day: date) -> None:
    """Refuse a day outside what a range may name: the day after 9999-12-31 is no date, and
    a query reaching past it failed with "date value out of range", naming nothing."""
    if not FIRST_DAY <= day <= LAST_DAY:
        raise forms.ValidationError(f"must be a day from {FIRST_DAY} to {LAST_DAY}, not {day}")


def day_field() -> forms.DateField:
    """An optional UTC day in a GET parameter (``YYYY-MM-DD``), rendered as
    ``<input type="date">``. Why: a plain text box gave no picker and no hint of the format
    it wants; the browser's picker submits exactly ``YYYY-MM-DD``, and a hand-typed bad
    value stays a 400 naming the parameter."""
    return forms.DateField(required=False, input_formats=[ISO_DAY], validators=[_within_days],
                           error_messages={"invalid": "must be a day written YYYY-MM-DD"},
                           widget=forms.DateInput(attrs={"type": "date"}, format=ISO_DAY))


def label_field(datalist: str) -> forms.CharField:
    """An optional exact model, team or cluster, offered from a ``<datalist>`` of the known
    ones (a fleet has tens of each); longer than a stored label is a 400 naming it."""
    return forms.CharField(required=False, max_length=MAX_LABEL_CHARS,
                           widget=forms.TextInput(attrs={"list": datalist}))


def gpus_field() -> forms.ChoiceField:
    """An optional GPU-size bucket (``GPU_BUCKETS``' labels)."""
    return forms.ChoiceField(required=False, label="GPUs", choices=[("", "any")] + [
        (label, label) for _, _, label in GPU_BUCKETS])


class LabelFilterForm(forms.Form):
    """The job labels a page filters by. ``cleaned_data["jobs"]`` is the query layer's
    :class:`JobFilter`, so every page and the API narrow by one definition."""

    model = label_field("models")
    team = label_field("teams")
    cluster = label_field("clusters")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["jobs"] = JobFilter(**{name: data.get(name) or ""
                                        for name in (*LABELS, "gpus") if name in self.fields})
        except ValueError as exc:  # e.g. a lone surrogate: the message starts with the name
            name = str(exc).split(" ", 1)[0]
            self.add_error(name if name in self.fields else None, str(exc))
        return data

    def filter_values(self) -> dict[str, str]:
        """The filter's GET parameters (empty ones left out), for links that keep it."""
        jobs: JobFilter = self.cleaned_data["jobs"]
        return jobs.params()


class JobFilterForm(LabelFilterForm):
    """The job labels and the GPU-size bucket."""

    gpus = gpus_field()


class CompareCheckbox(forms.CheckboxInput):
    """A checkbox that submits ``compare=previous`` (not Django's ``on``), so the URL reads as
    what it asks for and any other value is refused by the field's choices."""

    def __init__(self, value: str) -> None:
        super().__init__(attrs={"value": value}, check_test=lambda v: v == value)

    def format_value(self, value: Any) -> str | None:
        return None  # the submitted value is the ``value`` attribute above

    def value_from_datadict(self, data: Mapping[str, Any], files: Any, name: str) -> Any:
        return data.get(name, "")


COMPARE_PREVIOUS = "previous"


class FleetFilterForm(JobFilterForm):
    """Fleet overview inputs; every field is optional and defaults to the last 30 data days
    of every job; ``compare=previous`` overlays the period before on the trend."""

    date_from = day_field()
    date_to = day_field()
    interval = forms.ChoiceField(required=False, choices=[(i, i) for i in INTERVALS])
    group_by = forms.ChoiceField(required=False,
                                 choices=[(g, GROUP_LABELS[g]) for g in GROUPINGS])
    compare = forms.ChoiceField(required=False, label="Compare with the previous period",
                                choices=[(COMPARE_PREVIOUS, "previous period")],
                                widget=CompareCheckbox(COMPARE_PREVIOUS))

    def clean(self) -> dict[str, Any]:
        """Fill defaults and build the :class:`DateRange` (its own checks become form errors)."""
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["range"] = range_or_default(data.get("date_from"), data.get("date_to"),
                                             DEFAULT_DAYS)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        data["interval"] = data.get("interval") or "day"
        data["group_by"] = data.get("group_by") or "none"
        data["compare"] = data.get("compare") == COMPARE_PREVIOUS
        return data

    def params(self) -> dict[str, str]:
        """The view's GET parameters with defaults filled in (empty ones left out): what
        the inputs show and what links to other pages carry."""
        data = self.cleaned_data
        values = {"date_from": data["range"].date_from.isoformat(),
                  "date_to": data["range"].date_to.isoformat(),
                  "interval": data["interval"], "group_by": data["group_by"],
                  "compare": COMPARE_PREVIOUS if data.get("compare") else "",
                  **self.filter_values()}
        return {k: v for k, v in values.items() if v and k in self.fields}

    def link(self, *names: str, **changes: str) -> str:
        """A query string of this view's ``names`` parameters (all of them when none are
        named) with ``changes``, for a link that keeps the view: ``date_from=…&team=…``."""
        params = self.params()
        if names:
            params = {k: v for k, v in params.items() if k in names}
        params.update(changes)
        return urlencode({k: v for k, v in params.items() if v})

    def shown(self) -> FleetFilterForm:
        """The same form bound to the values the page used, defaults filled in, so the
        inputs show the range on screen rather than stay empty (a subclass gets its own
        class back; values for fields it dropped are ignored)."""
        return type(self)(self.params())


#: The parameters a link to the jobs list keeps: its own names for the same filter.
JOBS_LIST_PARAMS = ("date_from", "date_to", *LABELS, "gpus")


class ExportForm(forms.Form):
    """``format=csv&table=<name>``: one of the page's tables as CSV (``tables`` names them);
    an unknown format or table is a 400 naming it."""

    format = forms.ChoiceField(required=False, choices=[("csv", "csv")])
    table = forms.CharField(required=False, max_length=64)

    def __init__(self, data: Mapping[str, Any], tables: Sequence[str]) -> None:
        super().__init__(data)
        self.tables = tuple(tables)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors or not data.get("format"):
            return data
        if data.get("table") not in self.tables:
            self.add_error("table", f"must be one of {', '.join(self.tables)}, "
                                    f"not {data.get('table')!r}")
        return data

    @property
    def table_wanted(self) -> str | None:
        """The table to export, or None for the page itself."""
        return self.cleaned_data.get("table") if self.cleaned_data.get("format") else None


class JobPageForm(ExportForm):
    """The job page's inputs: an export (:class:`ExportForm`) and ``lanes_at``, the epoch
    second whose chunk of the timeline the per-rank lanes show (default: each attempt's
    first chunk)."""

    lanes_at = forms.FloatField(required=False, min_value=0.0, max_value=1e11,
                                help_text="epoch seconds: show the rank lanes of this chunk")


def accepts(field: forms.Field) -> str:
    """What a field takes, in words, for a refusal to say (empty when its error says it)."""
    if isinstance(field, forms.ChoiceField):
        choices: Iterable[tuple[Any, Any]] = field.choices  # type: ignore[assignment]
        values = [str(value) for value, _ in choices if value != ""]
        return f" (one of {', '.join(values)})" if values else ""
    return ""


def form_reason(form: forms.Form) -> str:
    """All errors on one line, each naming its parameter and what it takes: what a 400
    response says. Errors of the whole form (an inverted range) name their parameters in
    their own words, so they get no label of their own."""
    parts = []
    for name, errors in form.errors.items():
        text = " ".join(str(e) for e in errors)
        if name == "__all__":
            parts.append(text)
        else:
            parts.append(f"{name}: {text}{accepts(form.fields[name])}")
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
