"""The phase→component map as owners edit it: which categories a component is charged with.

Every page maps stored categories to components at query time (``queries.base``), so a
category moved here moves its lost time on every chart at the next load, history included.
The table starts seeded with ETT_SPEC §4's defaults; an empty table reads as the defaults,
so the first edit stores the defaults with it (one edited row alone would send every other
category to ``unknown``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import transaction
from django.db.models import Q

from ettweb.attribution.components import (
    DEFAULT_PHASE_COMPONENTS,
    PRODUCTIVE,
    UNKNOWN_COMPONENT,
    component_of,
)
from ettweb.components.known import known_components
from ettweb.components.models import PhaseMove
from ettweb.queries.base import phase_components
from ettweb.rollups.models import PhaseComponent


def components() -> list[str]:
    """Every component a category may be given to (``unknown`` included: it shows gaps)."""
    return sorted(set(known_components()) | {UNKNOWN_COMPONENT})


def category_map() -> dict[str, str]:
    """Every lost-time category the map or the defaults know, with its component now."""
    mapping = phase_components()
    categories = (set(mapping) | set(DEFAULT_PHASE_COMPONENTS)) - {PRODUCTIVE}
    return {category: component_of(category, mapping) for category in sorted(categories)}


def categories_of(component: str) -> list[str]:
    """The categories ``component`` is charged with, sorted."""
    return [category for category, owner in category_map().items() if owner == component]


class ReassignForm(forms.Form):
    """Move one of the page's component's categories to another component."""

    category = forms.CharField(max_length=64)
    component = forms.ChoiceField(choices=())

    def __init__(self, page_component: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.page_component = page_component
        self.fields["component"].choices = [(c, c) for c in components()]  # type: ignore[attr-defined]

    def clean_category(self) -> str:
        """Only a category this component has: the owner check was made for this page's
        component, so a category of someone else's must not ride along."""
        category: str = self.cleaned_data["category"]
        current = category_map().get(category)
        if current is None:
            raise forms.ValidationError(f"unknown category {category!r}")
        if current != self.page_component:
            raise forms.ValidationError(
                f"{category} belongs to {current}, not {self.page_component}")
        return category

    def reason(self) -> str:
        """The errors as one line naming each field."""
        return "; ".join(f"{field}: {' '.join(str(e) for e in errors)}"
                         for field, errors in self.errors.items())

    @transaction.atomic
    def save(self, user: Any = None) -> PhaseComponent:
        """Store the move (with the defaults, if the table held none) and record it."""
        if not PhaseComponent.objects.exists():
            PhaseComponent.objects.bulk_create(
                [PhaseComponent(phase=phase, component=component)
                 for phase, component in DEFAULT_PHASE_COMPONENTS.items()],
                ignore_conflicts=True)  # a first edit racing another stores the seed once
        row, _ = PhaseComponent.objects.update_or_create(
            phase=self.cleaned_data["category"],
            defaults={"component": self.cleaned_data["component"]})
        if row.component != self.page_component:
            PhaseMove.objects.create(category=row.phase, from_component=self.page_component,
                                     to_component=row.component,
                                     moved_by=user if getattr(user, "pk", None) else None)
        return row


def moves_of(component: str, limit: int = 50) -> list[PhaseMove]:
    """The newest moves of categories to or from ``component``."""
    return list(PhaseMove.objects.select_related("moved_by")
                .filter(Q(from_component=component) | Q(to_component=component))[:limit])
