"""The filter forms pages share: a page's inputs are validated before any query runs.

Job labels (model, team, cluster, GPUs) narrow every page by the query layer's one
:class:`JobFilter`; the fleet's filters add a range, an interval, a grouping and the
previous period; an export form names which of a page's tables to send as CSV.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from django import forms

from ettweb.pages.fields import (
    COMPARE_PREVIOUS,
    CompareCheckbox,
    day_field,
    gpus_field,
    label_field,
)
from ettweb.queries import GROUPINGS, INTERVALS, JobFilter
from ettweb.queries.base import DEFAULT_DAYS, LABELS, range_or_default

GROUP_LABELS = {"none": "whole fleet", "model": "model", "team": "team", "cluster": "cluster",
                "gpus": "GPU-size bucket"}


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
