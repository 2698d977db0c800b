"""The changes page's inputs: days, a component, a team (all optional)."""

from __future__ import annotations

from typing import Any

from django import forms

from ettweb.pages.fields import day_field, label_field
from ettweb.queries import ChangesQuery, FilterChoicesQuery, calculate
from ettweb.queries.components import component_names


class ChangesFilterForm(forms.Form):
    """``date_from``, ``date_to`` (the change's day, either open), ``component`` and
    ``team`` (exact; empty: any). An unknown component or team is a 400 naming it, as the
    API answers, rather than an empty list that looks like "nothing changed"."""

    date_from = day_field()
    date_to = day_field()
    component = forms.CharField(required=False, max_length=64,
                                widget=forms.TextInput(attrs={"list": "components",
                                                              "size": 16}))
    team = label_field("teams")

    def clean_component(self) -> str:
        name = str(self.cleaned_data.get("component") or "")
        if name and name not in component_names():
            raise forms.ValidationError(f"unknown component {name!r}")
        return name

    def clean_team(self) -> str:
        team = str(self.cleaned_data.get("team") or "")
        if team and team not in calculate(FilterChoicesQuery()).team:
            raise forms.ValidationError(f"unknown team {team!r}")
        return team

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["query"] = ChangesQuery(date_from=data.get("date_from"),
                                         date_to=data.get("date_to"),
                                         component=data.get("component") or "",
                                         team=data.get("team") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    @property
    def filtered(self) -> bool:
        return any(self.data.get(name) for name in self.fields)
