"""Which of a result's fields the API shows, and their JSON: declared once, on the result.

Why: an API field used to be written three times (the result dataclass, its ``as_api()``
dict and a ninja schema), and the three drifted. A result dataclass now says what it
exposes: its fields (less those marked ``hidden()``, sums kept to compute a property), plus
the properties it names in ``API_PROPERTIES``, each documented by ``doc(...)`` metadata or
the property's docstring. :func:`as_api` renders those as JSON and ``ettweb.api.schemas``
builds the response schema from the same list and type hints, so a new field is one line.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import date, datetime
from typing import Any, NamedTuple


class Exposed(NamedTuple):
    """One field the API shows: its name, its Python type and what it means (or empty)."""

    name: str
    hint: Any
    doc: str


def doc(text: str) -> dict[str, str]:
    """Field metadata that documents an exposed field: ``field(metadata=doc("..."))``."""
    return {"doc": text}


def hidden() -> dict[str, bool]:
    """Field metadata that keeps a field out of the API (a running sum a property reads)."""
    return {"api": False}


def exposed_fields(result: type) -> list[Exposed]:
    """The fields ``result`` (a dataclass) shows, in the order the API lists them: its own
    fields first, then ``API_PROPERTIES``."""
    hints = typing.get_type_hints(result)
    shown = [Exposed(f.name, hints[f.name], f.metadata.get("doc", ""))
             for f in dataclasses.fields(result) if f.metadata.get("api", True)]
    for name in getattr(result, "API_PROPERTIES", ()):
        getter = getattr(result, name).fget
        first_line = (getter.__doc__ or "").strip().split("\n\n", 1)[0]
        shown.append(Exposed(name, typing.get_type_hints(getter)["return"],
                             " ".join(first_line.split())))
    return shown


def as_json(value: Any) -> Any:
    """``value`` as the API writes it: days and times in ISO 8601, exposed results as dicts,
    lists and dicts item by item."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_api(value)
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return value


def as_api(result: Any) -> dict[str, Any]:
    """The exposed fields of ``result`` (a dataclass instance) as a JSON-ready dict."""
    return {field.name: as_json(getattr(result, field.name))
            for field in exposed_fields(type(result))}
