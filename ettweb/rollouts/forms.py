"""Rollout forms: the dashboard's create/edit form, the admin's form and the page's inputs.

Both editing forms end in :func:`ettweb.rollouts.validation.clean_rollout`, the checks the API
runs, so a rollout refused by the API is refused here with the same words.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms

from ettweb.components.known import known_components
from ettweb.pages.fields import day_field
from ettweb.pages.forms import LabelFilterForm
from ettweb.queries import RolloutListQuery
from ettweb.queries.impact import DEFAULT_WINDOW_DAYS, MAX_WINDOW_DAYS, MIN_WINDOW_DAYS
from ettweb.queries.markers import LIST_SORTS, LIST_VERDICTS
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import LIST_FIELDS
from ettweb.rollouts.validation import RolloutFields, RolloutProblems, clean_rollout

SCOPE_HELP = "comma-separated exact values; leave empty for every one"


def _split(text: str) -> list[str] | None:
    """``"ads, feed"`` → ``["ads", "feed"]``; an empty box means "not given", while a box
    holding only commas is a field given with no values (refused, as the API refuses it)."""
    if not text.strip():
        return None
    return [value for value in (part.strip() for part in text.split(",")) if value]


class RolloutForm(forms.Form):
    """Create or edit a rollout; scope fields are plain text boxes (comma-separated)."""

    name = forms.CharField(max_length=200)
    component = forms.ChoiceField(choices=())
    at = forms.DateTimeField(label="At (UTC)", input_formats=["%Y-%m-%dT%H:%M",
                                                              "%Y-%m-%dT%H:%M:%S",
                                                              "%Y-%m-%d %H:%M"],
                             widget=forms.DateTimeInput(attrs={"type": "datetime-local"},
                                                        format="%Y-%m-%dT%H:%M"))
    models = forms.CharField(required=False, help_text=SCOPE_HELP)
    teams = forms.CharField(required=False, help_text=SCOPE_HELP)
    clusters = forms.CharField(required=False, help_text=SCOPE_HELP)
    job_pattern = forms.CharField(required=False, max_length=200,
                                  help_text="shell-style glob on the job id, e.g. ads-*")
    notes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    link = forms.CharField(required=False, max_length=500, label="Link (http/https)")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["component"].choices = [(c, c) for c in known_components()]  # type: ignore[attr-defined]
        self.rollout_fields: RolloutFields | None = None

    @classmethod
    def initial_for(cls, rollout: Rollout) -> dict[str, Any]:
        scope = rollout.scope or {}
        initial: dict[str, Any] = {"name": rollout.name, "component": rollout.component,
                                   "at": rollout.at.replace(tzinfo=None, microsecond=0),
                                   "job_pattern": scope.get("job_pattern", ""),
                                   "notes": rollout.notes, "link": rollout.link}
        for name in LIST_FIELDS:
            initial[name] = ", ".join(scope.get(name, []))
        return initial

    def clean(self) -> dict[str, Any]:
        """Every problem at once: the fields' own (a bad date) and the rollout rules' (an
        unknown component, a bad link), each beside its input. A field Django refused is
        not checked again (its value is missing, so the rules would only repeat it)."""
        data = super().clean() or {}
        scope: dict[str, Any] = {}
        for name in LIST_FIELDS:
            values = _split(data.get(name) or "")
            if values is not None:
                scope[name] = values
        if data.get("job_pattern"):
            scope["job_pattern"] = data["job_pattern"].strip()
        raw = {**data, "scope": scope}
        try:
            self.rollout_fields = clean_rollout(raw, known_components())
        except RolloutProblems as exc:
            for problem in exc.problems:
                field = problem.field.removeprefix("scope.")
                if field not in self.errors:
                    self.add_error(field if field in self.fields else None, str(problem))
        return data


class RolloutAdminForm(forms.ModelForm):
    """The admin's form: the JSON scope and every other field pass ``clean_rollout``."""

    link = forms.CharField(required=False, max_length=500, help_text="an http(s) URL")

    class Meta:
        model = Rollout
        fields = ["name", "component", "at", "scope", "notes", "link", "created_by",
                  "simulated"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            fields = clean_rollout(data, known_components())
        except RolloutProblems as exc:
            for problem in exc.problems:
                field = problem.field.split(".")[0]
                self.add_error(field if field in self.fields else None, str(problem))
            return data
        data.update(name=fields.name, component=fields.component, at=fields.at,
                    scope=fields.scope.as_dict(), notes=fields.notes, link=fields.link)
        return data


class ImpactWindowForm(forms.Form):
    """The rollout page's ``?window=`` (whole UTC days, 1-90; 14 by default)."""

    window = forms.IntegerField(required=False, min_value=MIN_WINDOW_DAYS,
                                max_value=MAX_WINDOW_DAYS)

    def window_days(self) -> int:
        return int(self.cleaned_data.get("window") or DEFAULT_WINDOW_DAYS)


class RolloutListForm(LabelFilterForm):
    """The list page's filters: a component, the days (either open) and the model, team and
    cluster a rollout's scope must be able to reach (a cluster of markers links here with
    the chart's). No GPU size: a scope never names one."""

    component = forms.CharField(required=False, max_length=64,
                                widget=forms.TextInput(attrs={"list": "components",
                                                              "size": 16}))
    date_from = day_field()
    date_to = day_field()
    verdict = forms.ChoiceField(required=False, choices=[("", "any verdict")] + [
        (v, v.replace("_", " ")) for v in LIST_VERDICTS])
    sort = forms.ChoiceField(required=False, choices=[(s, s) for s in LIST_SORTS],
                             widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["query"] = RolloutListQuery(component=data.get("component") or "",
                                             date_from=data.get("date_from"),
                                             date_to=data.get("date_to"), jobs=data["jobs"],
                                             verdict=data.get("verdict") or "",
                                             sort=data.get("sort") or "-at")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    def link(self, **changes: str) -> str:
        """This view's query string with ``changes`` (the CSV export's), others kept."""
        params = {k: str(v) for k, v in self.data.items() if k in self.fields and v}
        params.update(changes)
        return urlencode(params)

    @property
    def filtered(self) -> bool:
        return any(self.data.get(name) for name in self.fields)
