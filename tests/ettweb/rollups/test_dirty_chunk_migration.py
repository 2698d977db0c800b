"""Chunk marks waiting when 0017 runs are folded into one row per job, none lost, and the
scope totals 0016 fills equal the label sums they are summed from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BEFORE = [("rollups", "0015_component_indexes")]


@pytest.fixture
def at_0015() -> Iterator[MigrationExecutor]:
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("rollups")
    executor.migrate(BEFORE)
    executor.loader.build_graph()
    yield executor
    executor.loader.build_graph()
    executor.migrate(latest)


def test_marks_fold_per_job_and_totals_fill_from_label_sums(
        at_0015: MigrationExecutor) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO rollups_dirtychunk (job, chunk) VALUES "
                       "('b', 7), ('a', 9), ('a', 3), ('a', 5)")
        cursor.execute(
            "INSERT INTO rollups_labeldayrollup (day, category, model, team, cluster, gpus, "
            "seconds, gpu_seconds) VALUES "
            "('2026-11-01', 'compile', 'm1', 'ads', 'east', '2-8', 10.5, 42), "
            "('2026-11-02', 'compile', 'm2', 'ads', 'east', '9-64', 0.25, 16), "
            "('2026-11-02', 'productive', 'm1', 'ads', 'east', '2-8', 100, 400), "
            "('2026-11-02', 'compile', 'm1', 'feed', 'west', '1', 1, 1)")
    at_0015.loader.build_graph()
    at_0015.migrate(at_0015.loader.graph.leaf_nodes("rollups"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT job, chunks FROM rollups_dirtychunk ORDER BY job")
        assert cursor.fetchall() == [("a", [3, 5, 9]), ("b", [7])]
        cursor.execute("SELECT team, cluster, category, seconds, gpu_seconds "
                       "FROM rollups_scopetotalrollup ORDER BY 1, 2, 3")
        assert [(t, c, k, float(s), float(g)) for t, c, k, s, g in cursor.fetchall()] == [
            ("ads", "east", "compile", 10.75, 58.0), ("ads", "east", "productive", 100.0, 400.0),
            ("feed", "west", "compile", 1.0, 1.0)]
