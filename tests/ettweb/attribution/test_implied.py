"""ETT_SPEC §3 rule 3, progress only a heartbeat saw: hand-computed hard kills (issue 41)."""

from __future__ import annotations

import pytest

from ettweb.attribution.engine import attribute_job
from ettweb.attribution.implied import (
    BACKWARDS,
    Beat,
    RankFacts,
    implied_id,
    implied_in_attempt,
    implied_span,
    is_implied,
)
from tests.ettweb.attribution.attribution_events import Timeline, hard_kill_example


def test_the_hand_computed_hard_kill() -> None:
    job = attribute_job(hard_kill_example().events)
    assert job.productive_s == pytest.approx(80.0)
    assert job.wall_s == pytest.approx(123.0)
    assert job.ett_pct == pytest.approx(100 * 80 / 123)
    assert job.lost_s == pytest.approx({"checkpoint_save": 2.0, "checkpoint_load": 6.0,
                                        "restart_gap": 20.0, "unattributed": 7.0,
                                        "repeated_training": 8.0})
    assert (job.wall_gpu_s, job.productive_gpu_s) == pytest.approx((492.0, 320.0))
    assert job.repeated_steps == 80
    assert job.repeated_steps_by_attempt == {2: 80}
    assert [a.status for a in job.attempts] == ["lost", "lost", "completed"]
    assert job.failures == 2
    assert job.time_to_start_s == pytest.approx(0.0)
    assert job.time_to_recover_s == pytest.approx([41.0, 21.0])
    assert job.anomalies == {}


def test_without_the_heartbeats_the_kill_hides_the_repeated_work() -> None:
    """The same timeline less its stepped heartbeats: what ETT showed before rule 3."""
    events = [e for e in hard_kill_example().events if "step" not in e]
    job = attribute_job(events)
    assert job.repeated_steps == 0
    assert job.productive_s == pytest.approx(60.0 + 20.0)


def test_an_implied_span_is_where_the_rule_puts_it() -> None:
    t = hard_kill_example()
    implied, backwards = implied_in_attempt("hard-kill", 0, [e for e in t.events if
                                                             e["attempt"] == 0 and
                                                             e["kind"] == "span"],
                                            [e for e in t.events if e["attempt"] == 0 and
                                             e["kind"] == "mark"])
    assert backwards == 0
    [span] = implied
    assert (span["start"], span["end"], span["step_start"], span["step_end"]) == (
        1062.0, 1070.0, 600, 680)
    assert is_implied(span) and span["id"] == implied_id(0, 0) and len(span["id"]) > 64


def test_when_every_slice_closed_nothing_changes() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 60, (0, 600))
    t.beat(0, 60, 600)
    t.train(0, 60, 90, (600, 900))
    t.beat(0, 75, 750)  # inside an open slice that later closed: active at t
    t.mark(0, "attempt_end", 95, status="failed")
    job = attribute_job(t.events)
    assert job.productive_s == pytest.approx(90.0)
    assert job.lost_s == pytest.approx({"failure": 5.0})


def test_a_heartbeat_without_step_implies_nothing() -> None:
    t = Timeline()
    t.train(0, 0, 60, (0, 600))
    t.beat(0, 80)
    t.mark(1, "attempt_start", 90)
    job = attribute_job(t.events)
    assert job.productive_s == pytest.approx(60.0)
    assert job.lost_s["unattributed"] == pytest.approx(20.0)


def test_a_backwards_heartbeat_is_an_anomaly_and_implies_nothing() -> None:
    t = Timeline()
    t.train(0, 0, 60, (0, 600))
    t.beat(0, 70, 680)
    t.beat(0, 80, 650)  # the latest, below the earlier 680
    t.mark(1, "attempt_start", 90)
    job = attribute_job(t.events)
    assert job.anomalies == {BACKWARDS: 1}
    assert job.productive_s == pytest.approx(60.0)
    assert job.lost_s["unattributed"] == pytest.approx(20.0)


def test_each_rank_implies_its_own_span() -> None:
    """Rank 1 was killed mid-slice; rank 0's slices all closed. The piece rule takes the
    lowest rank's active train span, so rank 1's implied span counts where rank 0 is idle."""
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=2)
    for rank in (0, 1):
        t.train(0, 0, 50, (0, 500), rank=rank)
    t.beat(0, 58, 580, rank=1)
    t.beat(0, 58, 500, rank=0)
    t.mark(1, "attempt_start", 70)
    t.train(1, 70, 80, (500, 600))
    t.mark(1, "attempt_end", 80, status="completed")
    job = attribute_job(t.events)
    assert job.productive_s == pytest.approx(50 + 8 + 2)
    assert job.lost_s["repeated_training"] == pytest.approx(8.0)
    assert job.repeated_steps == 80


def test_the_latest_end_of_any_span_starts_it() -> None:
    t = Timeline()
    t.train(0, 0, 60, (0, 600))
    t.span(0, "eval", 60, 70)
    t.span(0, "checkpoint_save", 65, 72)  # nested, ends later: u is 72
    t.beat(0, 80, 650)
    [span], _ = implied_in_attempt("j1", 0, [e for e in t.events if e["kind"] == "span"],
                                   [e for e in t.events if e["kind"] == "mark"])
    assert (span["start"], span["end"]) == (72.0, 80.0)


def test_the_rule_on_its_facts() -> None:
    beat = Beat("h", 100.0, 680)
    facts = RankFacts(train_end=90.0, train_step_end=600, last_end=92.0, active=False)
    span = implied_span("j", 0, 3, beat, facts)
    assert span is not None and (span["start"], span["end"], span["rank"]) == (92.0, 100.0, 3)
    assert implied_span("j", 0, 3, beat, RankFacts(90.0, 600, 92.0, True)) is None
    assert implied_span("j", 0, 3, beat, RankFacts(None, None, 92.0, False)) is None
    assert implied_span("j", 0, 3, Beat("h", 100.0, 600), facts) is None
    assert implied_span("j", 0, 3, Beat("h", 100.0, 680, earlier_max=700), facts) is None
    assert implied_span("j", 0, 3, None, facts) is None
