"""Every query finds its runner through ``ettweb.queries.registry``, and only its own.

Why: ``calculate()`` has no table of queries any more; a query class that forgot its
``@runner_for`` would fail only when a page first asked for it, and two runners for one
query would silently answer with whichever module was imported last.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import ettweb.queries
from ettweb.queries import Query, calculate, runner_for
from tests.subclasses import subclasses_in


def every_query() -> list[type[Query[object]]]:
    return subclasses_in(ettweb.queries, Query)


def test_every_query_has_its_own_runner() -> None:
    queries = every_query()
    assert len(queries) >= 20
    lacking = [cls.__name__ for cls in queries if "runner" not in vars(cls)]
    assert not lacking, f"queries without a @runner_for runner: {lacking}"
    for cls in queries:
        assert cls.runner.__name__ == f"{cls.__name__}Runner"


def test_a_query_without_a_runner_is_refused_by_name() -> None:
    @dataclass(frozen=True)
    class Orphan(Query[int]):
        pass

    with pytest.raises(TypeError, match="Orphan has no runner"):
        calculate(Orphan())


def test_a_second_runner_for_one_query_is_refused() -> None:
    @dataclass(frozen=True)
    class Twice(Query[int]):
        pass

    @runner_for(Twice)
    class TwiceRunner:
        def __init__(self, query: Twice) -> None:
            self.query = query

        def calculate(self) -> int:
            return 7

    assert calculate(Twice()) == 7
    with pytest.raises(TypeError, match="Twice already runs with TwiceRunner"):
        runner_for(Twice)(TwiceRunner)
