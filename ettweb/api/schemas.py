"""Response schemas built from the query results, so an API field is declared once.

``schema_of(TopJob)`` is a ninja ``Schema`` whose fields are what ``TopJob`` exposes
(``ettweb.queries.exposed``): the same names, the types its hints give (days and times as
the ISO strings ``as_api()`` writes, nested results as their own schemas) and the docs its
fields carry. Each schema is built once and named after its result (``TopJobOut``) unless
an older name is given, so the OpenAPI document keeps the component names clients know.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import date, datetime
from typing import Any

from ninja import Schema
from pydantic import Field, create_model

from ettweb.queries.exposed import exposed_fields

#: Every schema built here and the result it was built from (the test of "one definition
#: per field" walks it).
DERIVED: dict[type[Schema], type] = {}
_BY_RESULT: dict[type, type[Schema]] = {}


def api_type(hint: Any) -> Any:
    """The type the API documents for a result's ``hint``."""
    if hint in (date, datetime):
        return str
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return schema_of(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        mapped = tuple(api_type(arg) for arg in args)
        union = mapped[0]
        for arg in mapped[1:]:
            union = union | arg
        return union
    if origin is list or (origin is tuple and (args[1:] == (Ellipsis,)
                                               or len(set(args)) == 1)):
        # A list, a tuple of any length or a pair of numbers (an interval): a JSON array of
        # one type. A tuple of mixed items (a timeline piece) stays a tuple.
        return list[api_type(args[0])]  # type: ignore[misc]
    if origin is dict:
        key: Any = args[0]
        return dict[key, api_type(args[1])]  # type: ignore[misc]
    return hint


def schema_of(result: type, name: str | None = None) -> type[Schema]:
    """The response schema of ``result``'s exposed fields (built once per result)."""
    if result in _BY_RESULT:
        return _BY_RESULT[result]
    fields: dict[str, Any] = {}
    for field in exposed_fields(result):
        description = field.doc or None
        if field.optional:  # an inlined result that may be None: its fields are null
            fields[field.name] = (api_type(field.hint) | None,
                                  Field(None, description=description))
        else:
            fields[field.name] = (api_type(field.hint), Field(description=description))
    schema: type[Schema] = create_model(
        name or f"{result.__name__}Out", __base__=Schema, __module__=__name__,
        __doc__=result.__doc__ if result.__doc__ and not result.__doc__.startswith(
            result.__name__ + "(") else None, **fields)
    _BY_RESULT[result] = schema
    DERIVED[schema] = result
    return schema
