"""Bulk reads and writes through psycopg 3 itself, beneath Django's cursor.

Why: Django's connection binds parameters on the client (``ClientCursor``), so a list of
thousands of ids becomes SQL text, each element quoted by a regular expression in Python —
the largest client cost of a refresh of many jobs, and of an ingest batch's id claim. A
cursor that binds on the server sends such lists as binary arrays (``%b``), and binary COPY
sends rows without Postgres parsing any text. Errors still come out as Django's
(``DataError``, ``IntegrityError``), so callers catch what they always caught.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from psycopg.adapt import Dumper
from psycopg.pq import Format


@contextmanager
def server_cursor() -> Iterator[psycopg.Cursor[Any]]:
    """A cursor on Django's connection (and so in its transaction) that binds parameters on
    the server: use ``%b`` for a big list, sent as one binary array."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None  # ensure_connection connected
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        yield cursor


class JsonTextDumper(Dumper):
    """Dumps JSON *text* (already serialized and checked) as binary ``jsonb``: the version
    byte and the text, with no Python object around it. Registered for a COPY whose column
    types are set (``Copy.set_types``), where it is looked up by the ``jsonb`` oid."""

    format = Format.BINARY
    oid = psycopg.postgres.types["jsonb"].oid

    def dump(self, obj: Any) -> bytes:
        return b"\x01" + obj.encode()


def json_text_dumper(cursor: psycopg.Cursor[Any]) -> None:
    """Make ``cursor``'s binary COPY take JSON text for its ``jsonb`` columns."""
    cursor.adapters.register_dumper(None, JsonTextDumper)
