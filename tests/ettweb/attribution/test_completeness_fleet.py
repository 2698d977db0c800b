"""The completeness check beyond one crafted timeline: its facts fold over a job's chunks to
what the whole job's spans say (a refresh never reads the whole job), a chunk stored before
the check makes the job "not checked" rather than complete, and the simulated fleet (fully
instrumented) is not lit up with findings, while the same fleet with a phase taken out is
flagged exactly where that phase was."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import date
from typing import Any

import pytest

from collector.schema import validate_event
from ettweb.attribution import completeness
from ettweb.attribution.chunk_summary import AttemptSummary, chunk_of, fold, home_time, summarize
from ettweb.attribution.completeness import check_job, phase_facts
from ettweb.attribution.engine import attribute_job
from ettweb.attribution.lanes import category_timeline
from ettweb.simulate.events import fleet_events
from ettweb.simulate.fleet import FleetPlan
from tests.ettweb.attribution.attribution_events import Timeline

Event = dict[str, Any]
#: A month of 80 simulated jobs: restarts, resumes, evals, publishes; every phase recorded.
FLEET = FleetPlan(seed=11, days=30, jobs=80, end=date(2026, 11, 30))
#: The most jobs of a fully instrumented fleet the check may flag (it flags none today).
MAX_FLAGGED_SHARE = 0.02


def long_job() -> Timeline:
    """Two ranks, two attempts, over several quarter-hour chunks."""
    t = Timeline("long")
    for rank in (0, 1):
        t.span(0, "model_init", 0, 30, rank=rank)
        clock, step = 30.0, 0
        for _ in range(8):
            t.train(0, clock, clock + 500 + rank, (step, step + 1000), rank=rank)
            clock, step = clock + 600, step + 1000
        t.span(1, "checkpoint_load", 5000, 5020, rank=rank)
        t.train(1, 5020, 6020, (8000, 9000), rank=rank)
    t.mark(0, "attempt_start", 0)
    t.mark(0, "attempt_end", 4900, status="failed")
    t.mark(1, "attempt_start", 5000)
    return t


def summaries_by_chunk(events: list[Event], chunk_s: float = 900.0,
                       ) -> list[dict[int, AttemptSummary]]:
    by_chunk: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        by_chunk[chunk_of(home_time(event), chunk_s)].append(event)
    assert len(by_chunk) > 4
    return [summarize(by_chunk[k]) for k in sorted(by_chunk)]


def test_facts_folded_over_chunks_equal_the_whole_attempts() -> None:
    events = long_job().events
    stored = [{a: AttemptSummary.from_json(a, s.to_json()) for a, s in chunk.items()}
              for chunk in summaries_by_chunk(events)]
    skeleton = fold(stored)
    assert skeleton is not None
    for attempt in (0, 1):
        whole = phase_facts(e for e in events if e["kind"] == "span" and e["attempt"] == attempt)
        folded = skeleton.facts[attempt]
        assert folded is not None and folded.lead is not None and whole.lead is not None
        assert folded.phases == whole.phases
        assert folded.lead.seconds == pytest.approx(whole.lead.seconds)
        assert (folded.lead.rank, folded.lead.first_start, folded.lead.spans,
                folded.lead.steps) == (whole.lead.rank, whole.lead.first_start,
                                       whole.lead.spans, whole.lead.steps)
    assert skeleton.facts[0].lead.spans == 8  # type: ignore[union-attr]  # rank 0's alone


def test_a_chunk_summed_up_before_the_check_leaves_the_job_unchecked() -> None:
    events = long_job().events
    chunks = summaries_by_chunk(events)
    old = {a: s.to_json() for a, s in chunks[1].items()}
    for raw in old.values():
        del raw["ph"]  # as stored before the check existed
    chunks[1] = {a: AttemptSummary.from_json(a, raw) for a, raw in old.items()}
    skeleton = fold(chunks)
    assert skeleton is not None
    attribution = attribute_job(events)
    timeline = category_timeline(attribution.segments)
    assert completeness.check(attribution.attempts, timeline, skeleton.facts) is None
    fresh = fold(summaries_by_chunk(events))
    assert fresh is not None
    checked = completeness.check(attribution.attempts, timeline, fresh.facts)
    assert checked == check_job(events) and checked  # its train spans leave 100 s gaps


# --------------------------------------------------------------------------- the fleet

@pytest.fixture(scope="module")
def fleet() -> dict[str, list[Event]]:
    jobs: dict[str, list[Event]] = defaultdict(list)
    for event in fleet_events(FLEET):
        jobs[event["job"]].append(validate_event(event))
    return dict(jobs)


def findings_of(jobs: dict[str, list[Event]], without: str = "") -> dict[str, list[str]]:
    flagged: dict[str, list[str]] = {}
    for job, events in jobs.items():
        kept = [e for e in events if e.get("phase") != without]
        found = check_job(kept)
        if found:
            flagged[job] = [f.kind for f in found]
    return flagged


def test_the_simulated_fleet_is_not_lit_up(fleet: dict[str, list[Event]]) -> None:
    assert len(fleet) == FLEET.jobs
    restarted = sum(1 for events in fleet.values() if any(e["attempt"] > 0 for e in events))
    assert restarted >= 10  # resumes to check, not only first attempts
    flagged = findings_of(fleet)
    assert len(flagged) <= MAX_FLAGGED_SHARE * len(fleet), flagged


def test_without_checkpoint_load_the_resumed_jobs_and_only_they_are_flagged(
        fleet: dict[str, list[Event]]) -> None:
    loaded = {job for job, events in fleet.items()
              if any(e.get("phase") == "checkpoint_load" for e in events)}
    assert len(loaded) >= 5
    flagged = findings_of(fleet, without="checkpoint_load")
    assert set(flagged) == loaded
    assert Counter(k for kinds in flagged.values() for k in kinds) == Counter(
        {"checkpoint_load_missing": sum(
            1 for events in fleet.values()
            for e in events if e.get("phase") == "checkpoint_load")})


def test_without_compile_the_flagged_jobs_did_compile(fleet: dict[str, list[Event]]) -> None:
    """The simulator's compile is a span of its own, so taking it out leaves gaps (not a slow
    first train span): every job flagged then had compile spans, and each finding is a gap
    next to where compile ran."""
    flagged = findings_of(fleet, without="compile")
    assert flagged
    compiled = {job for job, events in fleet.items()
                if any(e.get("phase") == "compile" for e in events)}
    assert set(flagged) <= compiled
    assert {k for kinds in flagged.values() for k in kinds} == {"unattributed_gap"}
