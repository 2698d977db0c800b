"""COPY rows into the rollup tables.

A refresh writes many narrow rows per job; COPY streams them in one round trip, where the
ORM's bulk operations would build and quote a parameter for every cell. Rows are plain
tuples in :func:`copy_columns` order, or model instances read in that order.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import orjson
from django.db import connection


def copy_columns(model: type) -> list[str]:
    """The columns a COPY into ``model``'s table fills: every concrete one but ``id``."""
    return [f.column for f in model._meta.concrete_fields if f.name != "id"]  # type: ignore[attr-defined]


def copy_rows(cursor: Any, model: type, rows: list[tuple[Any, ...]], *,
              table: str | None = None) -> None:
    """COPY ``rows`` (``copy_columns`` order) into ``model``'s table, or into ``table``."""
    if not rows:
        return
    table = table or model._meta.db_table  # type: ignore[attr-defined]
    columns = ", ".join(connection.ops.quote_name(c) for c in copy_columns(model))
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def model_values(obj: Any) -> tuple[Any, ...]:
    """A model instance's column values in ``copy_columns`` order, JSON as text."""
    return tuple(_json(value) if isinstance(value, dict) else value
                 for value in _column_getter(type(obj))(obj))


def json_cells(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of plain values with its JSON cells (lists) as text, ready for COPY."""
    return tuple(_json(value) if isinstance(value, list) else value for value in row)


def _json(value: Any) -> str:
    """JSON text for a ``jsonb`` cell. orjson, not ``json.dumps``: a refresh writes a few
    such cells per job, and the stdlib encoder cost several times more. Postgres parses
    the text into ``jsonb``, so spacing and the spelling of a number make no difference;
    non-string keys become strings as ``json.dumps`` makes them."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _column_getter(model: type) -> Callable[[Any], tuple[Any, ...]]:
    """Reads an instance's ``copy_columns`` values in one call (one call per row written;
    every rollup model has several columns, so ``attrgetter`` returns a tuple)."""
    getter = _GETTERS.get(model)
    if getter is None:
        fields = [f.attname for f in model._meta.concrete_fields  # type: ignore[attr-defined]
                  if f.name != "id"]
        getter = _GETTERS[model] = operator.attrgetter(*fields)
    return getter
