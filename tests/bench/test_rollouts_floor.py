"""bench.rollouts_stages.floor: the rows an import left, loaded again into empty copies of their
tables, indexes and foreign keys included; nothing of it stays behind."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from django.db import connection

from bench.rollouts import write_fleet
from bench.rollouts_stages.floor import SCHEMA, measure
from ettweb.ingest.imports import import_lines, refresh_imported
from ettweb.settings.env import database_url

TABLES = ("ingest_event", "ingest_eventid", "rollups_jobrollup", "rollups_dailycategoryrollup")


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return int(cursor.fetchone()[0])


def _url() -> str:
    return database_url(connection.settings_dict)


def _schema_left() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [SCHEMA])
        return cursor.fetchone() is not None


@pytest.fixture
def imported(tmp_path: Path) -> None:
    """A few simulated jobs imported as ``ett_import`` does (stored, then refreshed)."""
    path = tmp_path / "fleet.jsonl"
    write_fleet(path, 5, 3, 8)
    with path.open("rb") as lines:
        summary = import_lines(lines, source="test", workers=1)
    refresh_imported(summary.jobs, workers=1)


@pytest.mark.django_db(transaction=True)
def test_the_floor_loads_every_row_the_import_left(imported: None) -> None:
    floor = measure(_url(), TABLES)
    assert floor.rows == sum(_count(table) for table in TABLES)  # counted in the copies
    assert _count("rollups_dailycategoryrollup") > 0
    assert floor.seconds > 0 and floor.megabytes > 0
    assert not _schema_left()


@pytest.mark.django_db(transaction=True)
def test_the_floor_keeps_the_foreign_keys(imported: None) -> None:
    """The day rows loaded first and alone (as if they were the parents) name jobs the
    floor's job table does not hold yet: refused, as Postgres would refuse them in the
    import's own tables."""
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        measure(_url(), ("rollups_jobrollup", "rollups_dailycategoryrollup"),
                parents=("rollups_dailycategoryrollup",))
    assert not _schema_left()
