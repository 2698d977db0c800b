"""The completeness check's rules, one by one: each fires on a timeline that leaves its phase
out, stays quiet on ETT_SPEC §3's fully instrumented worked example, and respects its
thresholds on both sides (no Django: ``ettweb.attribution.completeness`` is pure)."""

from __future__ import annotations

import pytest

from ettweb.attribution import completeness
from ettweb.attribution.completeness import (
    GAP_SHARE,
    MIN_FINDING_S,
    MIN_GAP_S,
    MIN_STEADY_STEPS,
    SLOW_FIRST_FACTOR,
    Finding,
    PhaseFacts,
    check_job,
    phase_facts,
)
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.completeness_events import bare, paused, restarted, slow_first


def kinds(t: Timeline) -> list[tuple[str, int]]:
    return [(f.kind, f.attempt) for f in check_job(t.events)]


def test_the_worked_example_is_complete() -> None:
    assert check_job(worked_example().events) == []


# --------------------------------------------------------------------------- checkpoint_load

def test_a_resume_without_checkpoint_load_is_flagged_with_its_time_and_step() -> None:
    (finding,) = check_job(restarted().events)
    assert (finding.kind, finding.attempt, finding.step) == ("checkpoint_load_missing", 1, 600)
    assert finding.seconds == pytest.approx(40.0)
    assert finding.message == ("Attempt 1: checkpoint_load looks missing: 40 s unattributed "
                               "before training resumed at step 600")
    assert "checkpoint_load" in finding.advice


def test_a_resume_with_its_checkpoint_load_is_not_flagged() -> None:
    assert check_job(restarted(load=True).events) == []


def test_a_restart_from_the_first_step_loads_nothing_and_is_not_flagged() -> None:
    assert kinds(restarted(resume_step=0)) == []
    # A trainer counting from step 1 restarts at step 1: still a fresh start.
    assert kinds(restarted(resume_step=1, first_step=1)) == []
    assert kinds(restarted(resume_step=2, first_step=1)) == [("checkpoint_load_missing", 1)]


def test_checkpoint_load_needs_min_finding_s_unattributed() -> None:
    assert kinds(restarted(wait_s=MIN_FINDING_S - 0.5)) == []
    assert kinds(restarted(wait_s=MIN_FINDING_S)) == [("checkpoint_load_missing", 1)]


# --------------------------------------------------------------------------- start-up

def test_a_start_with_no_spans_is_flagged() -> None:
    (finding,) = check_job(bare().events)
    assert (finding.kind, finding.attempt, finding.step) == ("startup_uninstrumented", 0, None)
    assert finding.seconds == pytest.approx(100.0)
    assert finding.message.startswith("Attempt 0: startup looks uninstrumented: 100 s")
    assert "model_init" in finding.advice and "checkpoint_load" not in finding.advice


def test_start_up_is_checked_against_its_share_and_min_finding_s() -> None:
    # 40 s of 100 unattributed (a scheduler's span holds the rest): not "mostly".
    share = completeness.STARTUP_UNATTRIBUTED_SHARE
    assert kinds(bare(100.0, scheduling_s=100.0 * (1 - share) + 10)) == []
    assert kinds(bare(100.0, scheduling_s=100.0 * (1 - share))) == [
        ("startup_uninstrumented", 0)]
    assert kinds(bare(MIN_FINDING_S - 1)) == []


def test_any_start_up_span_turns_the_finding_into_a_gap_between_phases() -> None:
    t = Timeline("partial")
    t.mark(0, "attempt_start", 0)
    t.span(0, "model_init", 300, 320)
    t.train(0, 320, 920, (0, 3000))
    t.train(0, 920, 1520, (3000, 6000))
    t.mark(0, "attempt_end", 1520, status="completed")
    (finding,) = check_job(t.events)
    assert (finding.kind, finding.before, finding.after) == (
        "unattributed_gap", "attempt start", "model_init")
    assert finding.message == "Attempt 0: 5 min unattributed between attempt start and model_init"


def test_a_resumed_attempt_with_no_spans_says_start_up_once_and_names_the_load() -> None:
    t = restarted()
    t.events = [e for e in t.events if not (e["attempt"] == 1 and e.get("phase") == "model_init")]
    (finding,) = check_job(t.events)
    assert (finding.kind, finding.attempt, finding.step) == ("startup_uninstrumented", 1, 600)
    assert finding.seconds == pytest.approx(60.0)
    assert "resuming at step 600" in finding.message and "checkpoint_load" in finding.advice


# --------------------------------------------------------------------------- compile

def test_a_first_span_far_slower_than_the_rest_without_compile_is_flagged() -> None:
    (finding,) = check_job(slow_first(70.0).events)
    assert (finding.kind, finding.attempt) == ("compile_folded", 0)
    assert finding.seconds == pytest.approx(60.0)  # 70 s against 100 steps x 0.1 s
    assert finding.pace_s == pytest.approx(0.1)
    assert finding.message == ("Attempt 0: compile looks folded into the first training span "
                               "(60 s above the steady rate of 0.1 s/step)")


def test_compile_folded_respects_its_thresholds() -> None:
    assert kinds(slow_first(70.0, compile_span=True)) == []
    at_factor = 100 * 0.1 * SLOW_FIRST_FACTOR  # 30 s: exactly 3x is not "more than"
    assert kinds(slow_first(at_factor)) == []
    assert kinds(slow_first(at_factor + 1)) == [("compile_folded", 0)]
    # 10 steps in 10.5 s: ten times the pace, but only 9.5 s above it.
    assert kinds(slow_first(1.0 + MIN_FINDING_S - 0.5, first_steps=10)) == []
    assert kinds(slow_first(1.0 + MIN_FINDING_S + 0.5, first_steps=10)) == [
        ("compile_folded", 0)]
    assert kinds(slow_first(70.0, steady_steps=MIN_STEADY_STEPS, steady_spans=2)) == [
        ("compile_folded", 0)]
    assert kinds(slow_first(70.0, steady_steps=MIN_STEADY_STEPS - 2, steady_spans=2)) == []
    assert kinds(slow_first(70.0, steady_spans=1)) == []


def test_the_pace_is_the_lowest_ranks() -> None:
    """Rank 1's first span is slow, rank 0's is not: rank 0 sets what is checked."""
    t = slow_first(10.0)
    t.events = [e for e in t.events if e.get("mark") != "attempt_end"]
    slow = slow_first(70.0, rank=1)
    t.events += [e for e in slow.events if e["kind"] == "span"]
    for index, event in enumerate(t.events):
        event["id"] = f"e{index}"
    assert kinds(t) == []
    lead = phase_facts([e for e in t.events if e["kind"] == "span"]).lead
    assert lead is not None and lead.rank == 0 and lead.spans == 4


# --------------------------------------------------------------------------- gaps

def test_gaps_between_the_same_phases_are_summed_and_flagged() -> None:
    (finding,) = check_job(paused(30.0).events)
    assert (finding.kind, finding.before, finding.after) == ("unattributed_gap", "train",
                                                             "train")
    assert finding.seconds == pytest.approx(90.0) and finding.gaps == 3
    assert finding.message == "Attempt 0: 90 s unattributed between train and train (3 gaps)"
    assert "keep the train span open" in finding.advice


def test_gaps_need_min_gap_s_and_gap_share() -> None:
    assert kinds(paused((MIN_GAP_S - 1) / 3)) == []
    # 90 s, but under GAP_SHARE of an attempt of ~4 x 3,000 s.
    assert GAP_SHARE * (4 * 3000) > 90.0
    assert kinds(paused(30.0, span_s=3000.0)) == []


def test_a_gap_before_the_attempt_end_names_it() -> None:
    t = paused(0.0, pauses=0)
    end = t.events.pop()
    t.mark(0, "attempt_end", end["ts"] + 200, status="completed")
    (finding,) = check_job(t.events)
    assert (finding.before, finding.after) == ("train", "attempt end")
    assert "shutdown" in finding.advice


def test_a_failure_tail_is_not_a_gap() -> None:
    """Time after a failed attempt's last event is ``failure`` (§3.4.4), not unattributed."""
    t = paused(0.0, pauses=0)
    end = t.events.pop()
    t.mark(0, "attempt_end", end["ts"] + 600, status="failed")
    assert kinds(t) == []


# --------------------------------------------------------------------------- stored form

def test_findings_and_facts_survive_their_json() -> None:
    for finding in [*check_job(restarted().events), *check_job(slow_first(70.0).events),
                    *check_job(paused(30.0).events)]:
        assert Finding.from_json(finding.to_json()) == finding
    facts = phase_facts([e for e in slow_first(70.0).events if e["kind"] == "span"])
    assert PhaseFacts.from_json(facts.to_json()) == facts
    assert PhaseFacts.from_json(PhaseFacts(frozenset()).to_json()) == PhaseFacts(frozenset())


def test_every_kind_has_a_meaning_and_its_own_message() -> None:
    assert set(completeness.FINDING_KINDS) == {
        "checkpoint_load_missing", "startup_uninstrumented", "compile_folded",
        "unattributed_gap"}
    messages = {kind: Finding(kind, 2, 125.0, step=7, before="eval", after="train", gaps=2,
                              pace_s=0.5).message for kind in completeness.FINDING_KINDS}
    assert len(set(messages.values())) == 4
    assert all(m.startswith("Attempt 2: ") and "2 min" in m for m in messages.values())
