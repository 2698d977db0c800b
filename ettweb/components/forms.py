"""Component page inputs: the fleet's range filters, and the owner-team edit."""

from __future__ import annotations

from django import forms

from ettweb.components.models import Component
from ettweb.pages.forms import FleetFilterForm

MAX_OWNER_TEAM_CHARS = 200


class ComponentFilterForm(FleetFilterForm):
    """/fleet/'s date range, interval and job filter (same defaults, same 400 reasons); no
    grouping and no overlay, since a component page is about one owner across the fleet."""

    group_by = None  # type: ignore[assignment]  # Django: None removes an inherited field
    compare = None  # type: ignore[assignment]


class OwnerTeamForm(forms.Form):
    """The team that owns a component; empty clears it."""

    owner_team = forms.CharField(max_length=MAX_OWNER_TEAM_CHARS, required=False, strip=True)

    def save(self, name: str) -> Component:
        """Store it, creating the component's row when it so far exists only in the phase
        map (the caller has checked that ``name`` is a component)."""
        component, _ = Component.objects.update_or_create(
            name=name, defaults={"owner_team": self.cleaned_data["owner_team"]})
        return component
