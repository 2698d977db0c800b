"""Which of a result's fields the API shows, and their JSON: declared once, on the result.

Why: an API field used to be written three times (the result dataclass, its ``as_api()``
dict and a ninja schema), and the three drifted. A result dataclass now says what it
exposes: its fields (less those marked ``hidden()``, sums kept to compute a property), plus
the properties it names in ``API_PROPERTIES``, each documented by ``doc(...)`` metadata or
the property's docstring. :func:`as_api` renders those as JSON and ``ettweb.api.schemas``
builds the response schema from the same list and type hints, so a new field is one line.
A result's own ``as_api()`` method, where it has one, is ``return as_api(self)`` and nothing
else: a key written there by hand would be one the schema does not know.

A field marked ``inline()`` holds another result whose fields (or the ones it names) the
API lists in its place, at the same level (a job's answer shows its headline's numbers and
its labels beside its name, not under ``headline``); when it may be None, its fields are
optional and null.

The API lists a result's fields first and its properties after, unless the result names the
order in ``API_ORDER``: clients (and byte-for-byte comparisons of answers) read the order the
keys always had, and a property such as ``ett_pct`` sits among the sums it is computed from.
``API_ORDER`` must name every exposed field exactly once, so it cannot drift from them.

A field marked ``shown_as(hint, render)`` is documented as ``hint`` and written as
``render(value)`` (a rollout's parsed scope, written as the dict it was given as; a verdict,
documented as the plain string the schema has always called it). There is no way to write a
field into ``as_api()`` but leave it out of the schema: ninja cuts an answer to its schema, so
such a field would be documented, computed and silently never sent.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, NamedTuple

from ettweb.platform.text import iso_utc


class Exposed(NamedTuple):
    """One field the API shows: its name, its Python type, what it means (or empty),
    whether it is a UTC time written with a ``Z``, the attributes read to reach it (more
    than its name when an inlined result holds it) and whether it may be left out (null)."""

    name: str
    hint: Any
    doc: str
    zulu: bool = False
    path: tuple[str, ...] = ()
    optional: bool = False
    render: Callable[[Any], Any] | None = None


def doc(text: str) -> dict[str, str]:
    """Field metadata that documents an exposed field: ``field(metadata=doc("..."))``."""
    return {"doc": text}


def zulu(text: str = "") -> dict[str, Any]:
    """Field metadata for a UTC time the API writes as ``2026-10-12T09:30:00Z``, the form
    the rollout API has always used for a rollout's moment (optionally documented)."""
    return {"zulu": True, **({"doc": text} if text else {})}


def hidden() -> dict[str, bool]:
    """Field metadata that keeps a field out of the API (a running sum a property reads)."""
    return {"api": False}


def shown_as(hint: Any, render: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Field metadata for a field documented as ``hint`` (and written as ``render(value)``
    when ``render`` is given)."""
    return {"hint": hint, **({"render": render} if render else {})}


def inline(*only: str) -> dict[str, Any]:
    """Field metadata for a result whose exposed fields the API lists in this one's place
    (``only`` those named, when names are given)."""
    return {"inline": only or True}


def _inlined(field: dataclasses.Field[Any], hint: Any) -> list[Exposed]:
    """The exposed fields of the result ``field`` holds, reached through it."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (
        types.UnionType, typing.Union) else (hint,)
    inner = [option for option in options if option is not type(None)]
    optional = len(inner) < len(options)
    only = field.metadata["inline"]
    return [sub._replace(path=(field.name, *sub.path), optional=sub.optional or optional)
            for sub in exposed_fields(inner[0]) if only is True or sub.name in only]


@functools.cache
def exposed_fields(result: type) -> tuple[Exposed, ...]:
    """The fields ``result`` (a dataclass) shows, in the order the API lists them: its own
    fields first (an inlined result's in its place), then ``API_PROPERTIES``; or
    ``API_ORDER``'s order.

    Cached per class: a class's fields never change once defined, and resolving its type
    hints on every response cost an API page more than some of its queries.
    """
    hints = typing.get_type_hints(result)
    shown: list[Exposed] = []
    for f in dataclasses.fields(result):
        if f.metadata.get("inline"):
            shown += _inlined(f, hints[f.name])
        elif f.metadata.get("api", True):
            shown.append(Exposed(
                f.name, f.metadata.get("hint", hints[f.name]), f.metadata.get("doc", ""),
                bool(f.metadata.get("zulu", False)), (f.name,),
                render=f.metadata.get("render")))
    for name in getattr(result, "API_PROPERTIES", ()):
        getter = getattr(result, name).fget
        first_line = (getter.__doc__ or "").strip().split("\n\n", 1)[0]
        shown.append(Exposed(name, typing.get_type_hints(getter)["return"],
                             " ".join(first_line.split()), path=(name,)))
    order: tuple[str, ...] | None = getattr(result, "API_ORDER", None)
    if order is not None:
        by_name = {field.name: field for field in shown}
        if len(by_name) != len(shown) or sorted(order) != sorted(by_name):
            raise TypeError(f"{result.__name__}.API_ORDER must name each exposed field once: "
                            f"{sorted(by_name)}")
        shown = [by_name[name] for name in order]
    return tuple(shown)


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
    shown: dict[str, Any] = {}
    kind: type = type(result)
    for field in exposed_fields(kind):
        value = result
        for name in field.path:
            value = None if value is None else getattr(value, name)
        if field.zulu:
            shown[field.name] = None if value is None else iso_utc(value)
        elif field.render is not None:
            shown[field.name] = None if value is None else field.render(value)
        else:
            shown[field.name] = as_json(value)
    return shown
