"""Distinct hashes prove distinct ids; anything else sends the engine to its exact path."""

from __future__ import annotations

from ettweb.attribution.distinct import hashes_distinct
from ettweb.attribution.engine import attribute


class _Clash:
    """Two different ids that hash alike: a collision, not a repeat."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Clash) and other.name == self.name


def test_distinct_ids_have_distinct_hashes() -> None:
    ids = [f"job-{job}:{serial}" for job in range(50) for serial in range(200)]
    assert hashes_distinct(ids, len(ids))
    assert hashes_distinct([], 0)


def test_a_repeat_or_a_collision_is_not_proved_distinct() -> None:
    assert not hashes_distinct(["a", "b", "a"], 3)
    assert not hashes_distinct([_Clash("a"), _Clash("b")], 2)


def test_a_repeat_across_jobs_is_still_dropped() -> None:
    def span(job: str, ident: str) -> dict[str, object]:
        return {"v": 1, "id": ident, "job": job, "attempt": 0, "kind": "span", "rank": 0,
                "host": "", "blocking": True, "attrs": {}, "phase": "compile",
                "start": 10.0, "end": 20.0}

    fleet = attribute([span("a", "x"), span("b", "x"), span("b", "y")])
    assert fleet.duplicates == 1
    assert [job.job for job in fleet.jobs] == ["a", "b"]
    assert [job.lost_s for job in fleet.jobs] == [{"compile": 10.0}, {"compile": 10.0}]
