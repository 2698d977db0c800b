"""The form fields a page's GET parameters are read with: a UTC day, a job label, a GPU-size
bucket and the compare-with-the-previous-period checkbox, each refusing what it cannot mean
with a message naming the value."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from django import forms

from ettweb.queries import GPU_BUCKETS
from ettweb.queries.base import FIRST_DAY, LAST_DAY, MAX_LABEL_CHARS

#: How days travel in GET parameters and how ``<input type="date">`` submits them.
ISO_DAY = "%Y-%m-%d"


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
