"""Golden timelines for the attribution rules (ETT_SPEC §3); arithmetic in the comments."""

from __future__ import annotations

import gc
from datetime import date

import pytest
from attribution_events import Timeline, worked_example

from ettweb.attribution.engine import (
    AGE_AFTER_OBJECTS,
    FleetAttribution,
    JobAttribution,
    Segment,
    attribute,
    attribute_job,
    gc_paused,
    per_day,
)


def _categories_total(job: JobAttribution) -> float:
    return job.productive_s + sum(job.lost_s.values())


# --- §3 worked example ------------------------------------------------------------------


def test_worked_example_through_the_api() -> None:
    job = attribute_job(worked_example().events)
    assert job.productive_s == 80.0
    assert job.lost_s == {
        "repeated_training": 8.0, "failure": 3.0, "restart_gap": 7.0,
        "process_group_init": 4.0, "compile": 6.0, "checkpoint_save": 2.0,
        "checkpoint_load": 3.0,
    }
    assert job.repeated_steps == 80
    assert job.wall_s == 113.0
    assert round(job.ett_pct, 2) == 70.80
    assert (job.wall_gpu_s, job.productive_gpu_s) == (452.0, 320.0)
    assert job.time_to_start_s == 10.0
    assert job.failures == 1
    assert job.time_to_recover_s == [21.0]
    assert [(a.attempt, a.start, a.end, a.status, a.gpus) for a in job.attempts] == [
        (0, 1000.0, 1083.0, "failed", 4), (1, 1090.0, 1113.0, "completed", 4),
    ]
    assert job.lost_by_component_s() == {
        "distributed_runtime": 4.0, "pt2_compiler": 6.0, "checkpointing": 5.0,
        "reliability": 11.0, "scheduler": 7.0,
    }


def test_worked_example_timeline_segments() -> None:
    segments = attribute_job(worked_example().events).segments
    assert segments == [
        Segment(1000.0, 1004.0, 0, 4, {"process_group_init": 4.0}),
        Segment(1004.0, 1010.0, 0, 4, {"compile": 6.0}),
        Segment(1010.0, 1070.0, 0, 4, {"productive": 60.0}),
        Segment(1070.0, 1072.0, 0, 4, {"checkpoint_save": 2.0}),
        Segment(1072.0, 1080.0, 0, 4, {"productive": 8.0}),
        Segment(1080.0, 1083.0, 0, 4, {"failure": 3.0}),
        # restart gaps are segments of the attempt that follows them
        Segment(1083.0, 1090.0, 1, 4, {"restart_gap": 7.0}),
        Segment(1090.0, 1093.0, 1, 4, {"checkpoint_load": 3.0}),
        # f = (min(800, 680) - 600) / 200 = 0.4 of 20 s repeated
        Segment(1093.0, 1113.0, 1, 4, {"productive": 12.0, "repeated_training": 8.0}),
    ]


# --- §3.1 / §3.2 attempt windows ----------------------------------------------------------


def test_windows_from_events_when_marks_are_missing() -> None:
    t = Timeline()
    t.span(0, "compile", 100, 110)
    t.train(0, 110, 150, (0, 100))
    t.span(1, "data_init", 160, 170)
    t.train(1, 170, 180, (100, 200))
    job = attribute_job(t.events)
    # attempt 0: [100, 150] earliest/latest event, 'lost' (a later attempt exists);
    # attempt 1: [160, 180], 'running' (the last attempt, no attempt_end)
    assert [(a.start, a.end, a.status) for a in job.attempts] == [
        (100.0, 150.0, "lost"), (160.0, 180.0, "running"),
    ]
    # wall 180 - 100 = 80; productive 40 + 10 = 50; gap 150..160 = 10; compile 10, data_init 10
    assert job.wall_s == 80.0
    assert job.productive_s == 50.0
    assert job.lost_s == {"compile": 10.0, "restart_gap": 10.0, "data_init": 10.0}
    # lost attempt: window ends at its last event, so no failure tail
    assert job.failures == 1
    # recover: last event 150 -> first productive second 170 (H = 100, f = 0)
    assert job.time_to_recover_s == [20.0]
    assert job.time_to_start_s == 10.0  # 110 - 100


def test_window_cut_at_next_attempt_start() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)  # no gpus: 1
    t.train(0, 0, 100, (0, 100))  # a zombie rank keeps reporting past the restart
    t.mark(1, "attempt_start", 60, gpus=2)
    t.train(1, 60, 100, (100, 140))
    job = attribute_job(t.events)
    # attempt 0 is cut at 60; its train span is clamped to [0, 60)
    assert [(a.start, a.end, a.status, a.gpus) for a in job.attempts] == [
        (0.0, 60.0, "lost", 1), (60.0, 100.0, "running", 2),
    ]
    # productive 60 + 40 = 100 = wall; GPU 60 x 1 + 40 x 2 = 140
    assert (job.wall_s, job.productive_s) == (100.0, 100.0)
    assert (job.wall_gpu_s, job.productive_gpu_s) == (140.0, 140.0)
    assert job.lost_s == {}
    # last event of attempt 0 clamped to its window end 60; productive again at 60
    assert job.time_to_recover_s == [0.0]


def test_restart_gap_weighted_by_following_attempt_gpus() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=8)
    t.span(0, "model_init", 0, 10)
    t.mark(0, "attempt_end", 10, status="cancelled")
    t.mark(1, "attempt_start", 30)  # gpus default: the previous attempt's 8
    t.span(1, "model_init", 30, 40)
    t.mark(1, "attempt_end", 40, status="cancelled")
    t.mark(2, "attempt_start", 50, gpus=2)
    t.span(2, "model_init", 50, 60)
    t.mark(2, "attempt_end", 60, status="completed")
    job = attribute_job(t.events)
    assert [a.gpus for a in job.attempts] == [8, 8, 2]
    # gaps 10..30 (20 s x 8 = 160) and 40..50 (10 s x 2 = 20)
    assert job.lost_s == {"model_init": 30.0, "restart_gap": 30.0}
    assert job.lost_gpu_s == {"model_init": 80.0 + 80.0 + 20.0, "restart_gap": 180.0}
    assert job.wall_gpu_s == 360.0
    assert job.failures == 0  # cancelled is not a failure


# --- §3.4.1 training ------------------------------------------------------------------------


def test_training_piece_follows_lowest_rank() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100), rank=0)
    t.train(0, 0, 10, (0, 100), rank=1)
    t.train(0, 10, 20, (50, 150), rank=0)  # rank 0 rolled back: H = 100, f = 50/100
    t.train(0, 10, 20, (100, 200), rank=1)  # rank 1 did not: f = 0
    t.mark(0, "attempt_end", 20, status="completed")
    job = attribute_job(t.events)
    # 10..20 follows rank 0: 5 repeated + 5 productive (rank 1 would say 10 productive)
    assert job.productive_s == 15.0
    assert job.lost_s == {"repeated_training": 5.0}
    # §3.7 sums over all train spans: 50 (rank 0) + 0 (rank 1)
    assert job.repeated_steps == 50


def test_training_tie_on_rank_takes_earliest_start() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100))
    t.train(0, 10, 30, (100, 300))  # H = 100, f = 0
    t.train(0, 12, 30, (50, 150))  # H = 100, f = 0.5, same rank but starts later
    t.mark(0, "attempt_end", 30, status="completed")
    job = attribute_job(t.events)
    # 12..30 is covered by both spans of rank 0: the one starting at 10 decides (f = 0)
    assert job.productive_s == 30.0
    assert job.lost_s == {}
    assert job.repeated_steps == 50  # still counted for the later span (150 -> 100 - 50)


def test_high_water_mark_needs_spans_ended_before_start() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100), rank=0)
    t.train(0, 5, 15, (0, 100), rank=1)  # rank 0's span ended at 10 > 5: H = 0
    t.mark(0, "attempt_end", 15, status="completed")
    job = attribute_job(t.events)
    assert job.repeated_steps == 0
    assert job.productive_s == 15.0


def test_steps_going_backwards_are_repeated() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (100, 200))
    t.train(0, 10, 20, (0, 50))  # H = 200 >= 50: f = clamp((50 - 0)/50) = 1
    t.mark(0, "attempt_end", 20, status="completed")
    job = attribute_job(t.events)
    assert job.productive_s == 10.0
    assert job.lost_s == {"repeated_training": 10.0}
    assert job.repeated_steps == 50


def test_zero_length_train_span_is_not_its_own_history() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 5, 5, (0, 10))  # ends at its own start; its own steps must not make H = 10
    t.train(0, 5, 15, (10, 20))  # H = 10 from the zero-length span: f = 0
    t.mark(0, "attempt_end", 15, status="completed")
    job = attribute_job(t.events)
    assert job.repeated_steps == 0
    assert job.productive_s == 10.0
    assert job.lost_s == {"unattributed": 5.0}


def test_training_wins_over_blocking_spans() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 10))
    t.span(0, "compile", 2, 4, rank=1)
    t.mark(0, "attempt_end", 10, status="completed")
    job = attribute_job(t.events)
    assert (job.productive_s, job.lost_s) == (10.0, {})


# --- §3.4.2 / §3.4.3 blocking and background spans --------------------------------------------


def test_blocking_innermost_per_rank_and_equal_shares() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "eval", 0, 10, rank=0)
    t.span(0, "publish", 2, 4, rank=0)  # inside eval on the same rank: the specific phase
    t.span(0, "data_init", 6, 8, rank=1)  # another rank: shares with eval
    t.mark(0, "attempt_end", 20, status="completed")
    job = attribute_job(t.events)
    # 0-2 eval 2 | 2-4 publish 2 | 4-6 eval 2 | 6-8 eval 1 + data_init 1 | 8-10 eval 2
    # 10-20 nothing active, completed attempt: unattributed 10
    assert job.lost_s == {"eval": 7.0, "publish": 2.0, "data_init": 1.0, "unattributed": 10.0}
    assert job.segments[3] == Segment(6.0, 8.0, 0, 1, {"data_init": 1.0, "eval": 1.0})


def test_same_clamped_bounds_share_equally() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "scheduling", -10, 5)  # clamped to [0, 5): same bounds as container_start
    t.span(0, "container_start", 0, 5)
    t.span(0, "compile", 5, 9)
    t.span(0, "model_init", 5, 9)  # identical bounds: neither contains the other
    t.mark(0, "attempt_end", 9, status="completed")
    job = attribute_job(t.events)
    assert job.lost_s == {"scheduling": 2.5, "container_start": 2.5,
                          "compile": 2.0, "model_init": 2.0}


def test_duplicate_phase_names_count_once() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "checkpoint_save", 0, 4, rank=0)
    t.span(0, "checkpoint_save", 0, 4, rank=1)
    t.span(0, "eval", 0, 4, rank=2)
    t.mark(0, "attempt_end", 4, status="completed")
    # distinct names checkpoint_save and eval: 2 s each, not 8/3 and 4/3
    assert attribute_job(t.events).lost_s == {"checkpoint_save": 2.0, "eval": 2.0}


def test_background_spans_share_only_when_nothing_blocks() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "publish", 0, 6, blocking=False)
    t.span(0, "checkpoint_save", 3, 9, blocking=False)
    t.span(0, "eval", 5, 7)
    t.mark(0, "attempt_end", 10, status="completed")
    job = attribute_job(t.events)
    # 0-3 publish 3 | 3-5 publish 1 + checkpoint_save 1 | 5-7 eval 2 (blocking wins)
    # 7-9 checkpoint_save 2 | 9-10 unattributed 1
    assert job.lost_s == {"publish": 4.0, "checkpoint_save": 3.0, "eval": 2.0,
                          "unattributed": 1.0}


def test_non_train_phase_named_productive_is_not_productive() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "productive", 0, 10)
    t.mark(0, "attempt_end", 10, status="completed")
    job = attribute_job(t.events)
    assert job.productive_s == 0.0
    assert job.lost_s == {"unattributed": 10.0}


# --- §3.4.4 / §3.4.5 failure tail and unattributed ------------------------------------------


@pytest.mark.parametrize(
    ("status", "tail"),
    [("failed", "failure"), ("preempted", "failure"),
     ("completed", "unattributed"), ("cancelled", "unattributed")],
)
def test_tail_after_last_event(status: str, tail: str) -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "compile", 0, 5)
    t.mark(0, "heartbeat", 7)
    t.mark(0, "attempt_end", 10, status=status)
    job = attribute_job(t.events)
    # 5-7 nothing active before the last event: unattributed 2; 7-10 after it: the tail, 3
    expected = {"compile": 5.0, "unattributed": 2.0}
    expected[tail] = expected.get(tail, 0.0) + 3.0
    assert job.lost_s == expected
    assert job.failures == (1 if tail == "failure" else 0)


def test_attempt_with_only_marks_is_all_failure() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=2)
    t.mark(0, "attempt_end", 10, status="failed")
    job = attribute_job(t.events)
    # the last event other than attempt_end is the start mark at 0: 0..10 is failure
    assert job.lost_s == {"failure": 10.0}
    assert job.lost_gpu_s == {"failure": 20.0}
    assert job.time_to_start_s is None
    assert job.time_to_recover_s == []  # nothing productive follows


# --- §3.8 sub-metrics ------------------------------------------------------------------------


def test_time_to_recover_one_value_per_failure() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100))
    t.mark(0, "attempt_end", 12, status="failed")
    t.mark(1, "attempt_start", 20)
    t.train(1, 20, 25, (50, 100))  # H = 100: f = 1, nothing productive in attempt 1
    t.mark(1, "attempt_end", 27, status="preempted")
    t.mark(2, "attempt_start", 30)
    t.train(2, 30, 40, (80, 180))  # f = 20/100: productive from 30 + 0.2 x 10 = 32
    t.mark(2, "attempt_end", 40, status="completed")
    job = attribute_job(t.events)
    assert job.failures == 2
    assert job.time_to_recover_s == [32.0 - 10.0, 32.0 - 25.0]
    # productive 10 + 8; repeated 5 + 2; failure 2 + 2; gaps 8 + 3; total 40
    assert job.productive_s == 18.0
    assert job.lost_s == {"failure": 4.0, "restart_gap": 11.0, "repeated_training": 7.0}
    assert job.repeated_steps == 50 + 20


# --- inconsistent but valid timelines --------------------------------------------------------


def test_spans_outside_window_are_clamped_or_ignored() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 10)
    t.span(0, "compile", 0, 15)  # clamped to [10, 15)
    t.span(0, "eval", 30, 40)  # after attempt_end: ignored
    t.mark(0, "attempt_end", 20, status="completed")
    job = attribute_job(t.events)
    assert job.wall_s == 10.0
    assert job.lost_s == {"compile": 5.0, "unattributed": 5.0}


def test_attempt_starting_before_the_previous_one() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 100)
    t.train(0, 100, 110, (0, 10))
    t.mark(0, "attempt_end", 110, status="failed")
    t.mark(1, "attempt_start", 50)  # clock skew: earlier than attempt 0
    t.span(1, "compile", 50, 120)
    t.mark(1, "attempt_end", 120, status="completed")
    job = attribute_job(t.events)
    # attempt 0 is cut at attempt 1's start (50), i.e. empty at 100; attempt 1 is moved to
    # start at 100 so windows stay ordered and disjoint: wall 120 - 100 = 20, all compile
    assert [(a.start, a.end) for a in job.attempts] == [(100.0, 100.0), (100.0, 120.0)]
    assert job.wall_s == 20.0
    assert job.lost_s == {"compile": 20.0}
    assert _categories_total(job) == job.wall_s


def test_end_mark_before_start_mark_gives_empty_window() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 10)
    t.mark(0, "attempt_end", 5, status="failed")
    job = attribute_job(t.events)
    assert (job.wall_s, job.lost_s, job.ett_pct, job.segments) == (0.0, {}, 0.0, [])


# --- segments and rollups ------------------------------------------------------------------


def test_adjacent_pieces_with_same_fractions_merge() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100))
    t.train(0, 10, 20, (100, 200))
    t.train(0, 20, 30, (150, 250))  # H = 200: f = 50/100 = 1/2
    t.train(0, 30, 40, (225, 425))  # H = 250: f = 25/200 ... not 1/2
    t.train(0, 40, 50, (400, 600))  # H = 425: f = 25/200 = 1/8, same as above
    t.mark(0, "attempt_end", 50, status="completed")
    segments = attribute_job(t.events).segments
    assert [(s.start, s.end) for s in segments] == [(0.0, 20.0), (20.0, 30.0), (30.0, 50.0)]
    assert segments[2].shares == {"productive": 17.5, "repeated_training": 2.5}


def test_per_day_splits_at_utc_midnight() -> None:
    midnight = 86400.0  # 1970-01-02T00:00Z
    t = Timeline()
    t.mark(0, "attempt_start", midnight - 100, gpus=2)
    t.train(0, midnight - 100, midnight + 50, (0, 10))
    t.span(0, "eval", midnight + 50, midnight + 60)
    t.mark(0, "attempt_end", midnight + 60, status="completed")
    job = attribute_job(t.events)
    # 100 s x 2 GPUs on Jan 1; 50 s x 2 productive + 10 s x 2 eval on Jan 2
    assert job.per_day_gpu_s() == {
        date(1970, 1, 1): {"productive": 200.0},
        date(1970, 1, 2): {"productive": 100.0, "eval": 20.0},
    }
    assert per_day(job.segments, gpu_weighted=False)[date(1970, 1, 2)] == {
        "productive": 50.0, "eval": 10.0,
    }


# --- grouping, duplicates, fleet -----------------------------------------------------------


def test_duplicate_ids_count_once() -> None:
    events = worked_example().events
    job = attribute_job([*events, events[3], events[3], events[0]])
    assert job.duplicates == 3
    assert job.productive_s == 80.0
    assert job.wall_gpu_s == 452.0


def test_fleet_is_gpu_weighted_and_sorted_by_job() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=3, job="b")
    t.span(0, "compile", 0, 10, job="b")
    t.mark(0, "attempt_end", 10, status="completed", job="b")
    t.mark(0, "attempt_start", 0, gpus=1, job="a", model="dlrm", team="ads")
    t.train(0, 0, 10, (0, 10), job="a")
    t.mark(0, "attempt_end", 10, status="completed", job="a")
    fleet = attribute([*t.events, t.events[1]])
    assert isinstance(fleet, FleetAttribution)
    assert [job.job for job in fleet.jobs] == ["a", "b"]
    assert fleet.jobs[0].attempts[0].attrs == {"model": "dlrm", "team": "ads"}
    # 10 productive GPU-s of 10 + 30 wall GPU-s: 25%, not the unweighted mean 50%
    assert fleet.ett_pct == 25.0
    assert fleet.duplicates == 1
    assert fleet.jobs[1].duplicates == 1
    assert fleet.lost_gpu_s == {"compile": 30.0}


def test_attribute_job_refuses_mixed_jobs() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, job="a")
    t.mark(0, "attempt_start", 0, job="b")
    with pytest.raises(ValueError, match="exactly one job"):
        attribute_job(t.events)


# --- readings of points the spec leaves open (listed in the report to the lead) ------------


def test_repeated_steps_sum_over_every_rank() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100), rank=0)
    t.train(0, 0, 10, (0, 100), rank=1)
    t.mark(0, "attempt_end", 10, status="failed")
    t.mark(1, "attempt_start", 10)
    t.train(1, 10, 20, (50, 150), rank=0)
    t.train(1, 10, 20, (50, 150), rank=1)
    t.mark(1, "attempt_end", 20, status="completed")
    job = attribute_job(t.events)
    # §3.7 read literally: "sum over its train spans" counts both ranks' 50 repeated steps
    assert job.repeated_steps == 100
    assert job.lost_s == {"repeated_training": 5.0}  # time follows rank 0 only


def test_latest_attempt_end_wins() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.span(0, "shutdown", 0, 4)
    t.mark(0, "attempt_end", 5, status="cancelled")  # rank 1 gave up first
    t.mark(0, "attempt_end", 8, status="failed")  # rank 0's end is later: it decides
    job = attribute_job(t.events)
    assert (job.attempts[0].end, job.attempts[0].status) == (8.0, "failed")
    assert job.lost_s == {"shutdown": 4.0, "failure": 4.0}


def test_first_copy_of_a_repeated_id_wins() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    first = t.span(0, "compile", 0, 10)
    t.mark(0, "attempt_end", 10, status="completed")
    clash = {**first, "phase": "eval"}
    job = attribute_job([*t.events, clash])
    assert job.duplicates == 1
    assert job.lost_s == {"compile": 10.0}


def test_time_to_start_never_negative() -> None:
    t = Timeline()
    t.train(0, 5, 10, (0, 5))  # reported before the attempt_start mark (clock skew)
    t.mark(0, "attempt_start", 8)
    t.mark(0, "attempt_end", 10, status="completed")
    job = attribute_job(t.events)
    assert job.time_to_start_s == 0.0
    assert job.productive_s == 2.0  # clamped to the window [8, 10]


# --- pausing the garbage collector --------------------------------------------------------


def test_gc_paused_restores_the_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the caller had it off: it stays off
    finally:
        gc.enable()


def _collections_after_pausing_for(objects: int) -> list[int]:
    """The collections run while ``objects`` lists are made paused, then a few more."""
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        with gc_paused():
            kept = [[index] for index in range(objects)]
        more = [[index] for index in range(10)]
    finally:
        gc.callbacks.remove(seen)
    assert len(kept) + len(more) == objects + 10
    return collections


def test_what_a_long_pause_made_is_not_scanned_on_resuming() -> None:
    assert _collections_after_pausing_for(AGE_AFTER_OBJECTS + 1000) == []


def test_a_short_pause_leaves_the_usual_collection() -> None:
    assert gc.get_threshold()[0] < 5000
    assert _collections_after_pausing_for(5000) != []


def test_objects_the_host_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():  # enough new objects that a pause would otherwise freeze them
            kept = [[index] for index in range(150_000)]
        # Neither unfrozen (0) nor joined by ours; a frozen object that died meanwhile leaves
        # the count, so it may only shrink.
        assert 0 < gc.get_freeze_count() <= frozen
        assert kept
    finally:
        gc.unfreeze()
