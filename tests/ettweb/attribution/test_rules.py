"""One hand-computed golden timeline per ETT_SPEC §3 rule that ``test_engine.py`` leaves
implicit, plus the restart tax (``recoveries``) and ``anomalies``; arithmetic in comments.

Rule -> test, all files of this folder (so a reviewer can check nothing is missing):
  §3.1 missing marks ........... test_engine::test_windows_from_events_when_marks_are_missing
       overlap cut ............. test_engine::test_window_cut_at_next_attempt_start
       running / lost status ... test_running_attempt_*, test_lost_attempt_*
  §3.2 restart gaps ............ test_engine::test_restart_gap_weighted_by_following_attempt_gpus
  §3.4 cut at the last event ... test_engine::test_tail_after_last_event
  §3.4.1 restart from checkpoint  test_engine::test_worked_example_*, test_restart_from_checkpoint_*
       in-process rollback ..... test_in_process_rollback_is_repeated_training
       s1 = s0 ................. test_train_span_without_steps_is_productive
       lowest rank, tie ........ test_engine::test_training_piece_follows_lowest_rank, ..._tie_...
  §3.4.2 innermost, equal share  test_engine::test_blocking_innermost_*, test_same_clamped_*
  §3.4.3 non-blocking .......... test_engine::test_background_spans_share_only_when_nothing_blocks
  §3.4.4 failure tails ......... test_engine::test_tail_after_last_event, test_failure_tail_*
  §3.4.5 unattributed .......... test_engine::test_tail_after_last_event (completed/cancelled)
  §3.5 GPU weighting ........... test_engine::test_restart_gap_weighted_*, test_day_split_*
  §3.6 UTC-day splits .......... test_engine::test_per_day_*, test_day_split_*
  §3.7 repeated_steps .......... test_in_process_rollback_*, test_restart_from_checkpoint_*
  §3.8 sub-metrics ............. test_engine::test_time_to_recover_*, test_recovery_*
  duplicates ................... test_engine::test_duplicate_ids_count_once, ..._first_copy_...
"""

from __future__ import annotations

from datetime import date

import pytest
from attribution_events import Timeline, worked_example

from ettweb.attribution.engine import ANOMALY_KINDS, Recovery, attribute_job

# --- §3.1 attempt status without attempt_end ------------------------------------------------


def test_running_attempt_ends_at_its_latest_event_without_a_failure_tail() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 40, (0, 400))
    t.mark(0, "heartbeat", 50)
    job = attribute_job(t.events)
    # no attempt_end, no later attempt: 'running', window [0, 50] (the heartbeat is latest)
    assert [(a.start, a.end, a.status) for a in job.attempts] == [(0.0, 50.0, "running")]
    # 40-50: nothing active and the attempt did not fail: unattributed, not failure
    assert (job.productive_s, job.lost_s, job.failures) == (40.0, {"unattributed": 10.0}, 0)
    assert job.ett_pct == 80.0  # 40 / 50


def test_lost_attempt_has_no_failure_tail_and_counts_as_failure() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 30, (0, 300))
    t.mark(0, "heartbeat", 35)
    t.mark(1, "attempt_start", 60)
    t.train(1, 60, 80, (300, 500))
    t.mark(1, "attempt_end", 80, status="completed")
    job = attribute_job(t.events)
    # attempt 0: no attempt_end but attempt 1 exists -> 'lost', window [0, 35]: its window
    # ends at its last event, so no piece lies after it: 30-35 is unattributed, not failure
    assert [(a.end, a.status) for a in job.attempts] == [(35.0, "lost"), (80.0, "completed")]
    assert job.lost_s == {"unattributed": 5.0, "restart_gap": 25.0}  # gap 35 -> 60
    assert job.productive_s == 50.0  # 30 + 20 (H = 300 = s0: f = 0)
    assert job.failures == 1
    assert job.time_to_recover_s == [25.0]  # last event 35 -> productive from 60


# --- §3.4.1 training and repeated training ---------------------------------------------------


def test_in_process_rollback_is_repeated_training() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=2)
    t.train(0, 0, 10, (0, 100))
    t.span(0, "checkpoint_save", 10, 12)
    t.train(0, 12, 22, (100, 200))
    t.train(0, 22, 32, (150, 250))  # loss spike: rolled back to step 150 in the same process
    t.train(0, 32, 42, (250, 350))
    t.mark(0, "attempt_end", 42, status="completed")
    job = attribute_job(t.events)
    # 22-32: H = max step_end of spans ended <= 22 = 200; f = (200 - 150) / 100 = 0.5 -> 5 s
    # 32-42: H = 250 (the rolled-back span ended at 32) = s0 -> f = 0
    # productive 10 + 10 + 5 + 10 = 35; repeated 5; checkpoint_save 2; wall 42
    assert job.productive_s == 35.0
    assert job.lost_s == {"checkpoint_save": 2.0, "repeated_training": 5.0}
    assert job.repeated_steps == 50  # min(250, 200) - 150
    assert (job.wall_gpu_s, job.productive_gpu_s) == (84.0, 70.0)  # x 2 GPUs
    assert job.ett_pct == pytest.approx(100 * 35 / 42)
    # a rollback is not a failure: no recovery is measured
    assert (job.failures, job.time_to_recover_s, job.recoveries) == (0, [], [])


def test_restart_from_checkpoint_counts_the_repeated_steps_of_every_rank() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=8)
    for rank in (0, 1):
        t.train(0, 0, 60, (0, 600), rank=rank)
        t.train(0, 60, 90, (600, 900), rank=rank)  # crashed; last checkpoint at step 600
    t.mark(0, "attempt_end", 100, status="preempted")
    t.mark(1, "attempt_start", 130)
    for rank in (0, 1):
        t.span(1, "checkpoint_load", 130, 140, rank=rank)
        t.train(1, 140, 200, (600, 1200), rank=rank)
    t.mark(1, "attempt_end", 200, status="completed")
    job = attribute_job(t.events)
    # attempt 1's span: H = 900, f = (900 - 600) / 600 = 0.5 of 60 s -> 30 repeated
    # productive 90 + 30 = 120; failure 90-100 = 10; gap 100-130 = 30; load 10; wall 200
    assert job.productive_s == 120.0
    assert job.lost_s == {"failure": 10.0, "restart_gap": 30.0, "checkpoint_load": 10.0,
                          "repeated_training": 30.0}
    assert job.repeated_steps == 300 + 300  # §3.7 sums over the spans of both ranks
    assert job.wall_gpu_s == 1600.0  # 200 s x 8 GPUs (attempt 1 inherits 8)
    # recover: last event 90 -> 140 + 0.5 x 60 = 170
    assert job.time_to_recover_s == [80.0]


def test_train_span_without_steps_is_productive() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100))
    t.train(0, 10, 20, (100, 100))  # s1 = s0: f is 0 by definition, whatever H (= 100) is
    t.train(0, 20, 30, (50, 50))  # even below H: still f = 0, no repeated steps
    t.mark(0, "attempt_end", 30, status="completed")
    job = attribute_job(t.events)
    assert (job.productive_s, job.lost_s, job.repeated_steps) == (30.0, {}, 0)


# --- §3.4.4 failure tail, §3.5 GPUs, §3.6 UTC days, §3.8 recoveries ----------------------------


def test_failure_tail_starts_after_the_latest_span_of_any_rank() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 20, (0, 200), rank=0)
    t.span(0, "checkpoint_save", 20, 26, rank=3)  # rank 3's last span ends at 26
    t.mark(0, "attempt_end", 40, status="failed")
    job = attribute_job(t.events)
    # the last event other than attempt_end is 26: 26-40 = 14 s failure; 20-26 checkpoint_save
    assert job.lost_s == {"checkpoint_save": 6.0, "failure": 14.0}


MIDNIGHT = 2 * 86400.0  # 1970-01-03T00:00Z


def _across_midnight() -> Timeline:
    t = Timeline()
    t.mark(0, "attempt_start", MIDNIGHT - 100, gpus=4)
    t.train(0, MIDNIGHT - 100, MIDNIGHT - 40, (0, 60))
    t.mark(0, "attempt_end", MIDNIGHT - 30, status="failed")
    t.mark(1, "attempt_start", MIDNIGHT + 20, gpus=2)
    t.train(1, MIDNIGHT + 20, MIDNIGHT + 80, (30, 90))  # H = 60: f = 30 / 60 = 0.5
    t.mark(1, "attempt_end", MIDNIGHT + 80, status="completed")
    return t


def test_day_split_of_a_restart_gap_uses_the_following_attempts_gpus() -> None:
    job = attribute_job(_across_midnight().events)
    # Jan 2: productive 60 s x 4, failure (M-40 .. M-30) 10 s x 4, gap M-30 .. M = 30 s x 2
    # Jan 3: gap M .. M+20 = 20 s x 2, attempt 1: 30 s repeated + 30 s productive, x 2
    assert job.per_day_gpu_s() == {
        date(1970, 1, 2): {"productive": 240.0, "failure": 40.0, "restart_gap": 60.0},
        date(1970, 1, 3): {"restart_gap": 40.0, "productive": 60.0,
                           "repeated_training": 60.0},
    }
    assert job.wall_gpu_s == 240 + 40 + 60 + 40 + 60 + 60


def test_recovery_splits_the_time_to_recover_by_category() -> None:
    job = attribute_job(_across_midnight().events)
    # from the last event M-40 to the first productive second M+20 + 0.5 x 60 = M+50: 90 s =
    # failure 10 + restart_gap 50 + repeated_training 30 (repeated steps come first)
    assert job.time_to_recover_s == [90.0]
    assert job.recoveries == [Recovery(
        attempt=0, start=MIDNIGHT - 40, end=MIDNIGHT + 50,
        by_category={"failure": 10.0, "restart_gap": 50.0, "repeated_training": 30.0},
        by_category_gpu_s={"failure": 40.0, "restart_gap": 100.0, "repeated_training": 60.0},
    )]


def test_one_recovery_per_failure_overlapping_when_a_restart_fails_again() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (0, 100))
    t.mark(0, "attempt_end", 12, status="failed")
    t.mark(1, "attempt_start", 20)
    t.span(1, "compile", 20, 23)
    t.mark(1, "attempt_end", 25, status="preempted")  # failed again before training
    t.mark(2, "attempt_start", 30)
    t.train(2, 30, 40, (100, 200))
    t.mark(2, "attempt_end", 40, status="completed")
    recoveries = attribute_job(t.events).recoveries
    # attempt 0: 10 -> 30 = failure 2 + gap 8 + compile 3 + failure 2 + gap 5 = 20
    # attempt 1: its last event is compile's end 23 -> 30 = failure 2 + gap 5 = 7
    assert [(r.attempt, r.start, r.end, r.by_category) for r in recoveries] == [
        (0, 10.0, 30.0, {"failure": 4.0, "restart_gap": 13.0, "compile": 3.0}),
        (1, 23.0, 30.0, {"failure": 2.0, "restart_gap": 5.0}),
    ]


def test_worked_example_recovery_matches_time_to_recover() -> None:
    job = attribute_job(worked_example().events)
    (recovery,) = job.recoveries
    # 1080 -> 1101: failure 3 (1080-1083), gap 7, checkpoint_load 3, repeated 8 (1093-1101)
    assert recovery.by_category == {"failure": 3.0, "restart_gap": 7.0,
                                    "checkpoint_load": 3.0, "repeated_training": 8.0}
    assert recovery.duration_s == job.time_to_recover_s[0] == 21.0


# --- anomalies: inconsistent but valid timelines are attributed and counted -----------------


def _anomalies(t: Timeline) -> dict[str, int]:
    return attribute_job(t.events).anomalies


def test_consistent_timeline_has_no_anomalies() -> None:
    assert _anomalies(worked_example()) == {}


def test_spans_and_heartbeats_outside_the_window() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 10)
    t.span(0, "compile", 5, 15)  # starts before the start mark
    t.span(0, "eval", 30, 40)  # wholly after attempt_end
    t.span(0, "model_init", 10, 20)  # inside: not counted
    t.mark(0, "heartbeat", 25)
    t.mark(0, "attempt_end", 20, status="completed")
    assert _anomalies(t) == {"span_outside_attempt": 2, "heartbeat_outside_attempt": 1}


def test_events_of_an_attempt_after_a_later_attempt_started() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 50, (0, 500))  # a zombie rank: its span crosses attempt 1's start
    t.mark(0, "heartbeat", 70)  # and it still beats after attempt 1 started at 60
    t.mark(1, "attempt_start", 60)
    t.train(1, 60, 90, (500, 800))
    t.mark(1, "attempt_end", 90, status="completed")
    job = attribute_job(t.events)
    # window 0 = [0, 60): cut at attempt 1's start; the heartbeat at 70 is outside it too
    assert job.anomalies == {"events_after_later_attempt_start": 1,
                             "heartbeat_outside_attempt": 1}
    assert job.productive_s == 80.0  # 50 + 30; 50-60 unattributed (attempt 0 'lost')


def test_attempt_starting_before_the_previous_one_and_end_before_start() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 100)
    t.mark(0, "attempt_end", 110, status="failed")
    t.mark(1, "attempt_start", 50)  # attempt number grew, clock went back
    t.mark(1, "attempt_end", 40, status="completed")  # and its end precedes its start
    anomalies = _anomalies(t)
    assert anomalies["attempt_starts_before_previous"] == 1
    assert anomalies["attempt_end_before_start"] == 1
    # both marks of attempt 0 (100 and 110) come after attempt 1's start (50)
    assert anomalies["events_after_later_attempt_start"] == 2


def test_repeated_and_conflicting_marks() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0, gpus=2)
    t.mark(0, "attempt_start", 1, gpus=2)
    t.span(0, "compile", 0, 5)
    t.mark(0, "attempt_end", 6, status="failed")
    t.mark(0, "attempt_end", 7, status="completed")
    t.mark(0, "attempt_end", 8, status="completed")
    job = attribute_job(t.events)
    assert job.anomalies == {"repeated_attempt_start": 1, "repeated_attempt_end": 2,
                             "conflicting_attempt_end_status": 1}
    assert (job.attempts[0].end, job.attempts[0].status) == (8.0, "completed")


def test_train_steps_going_backwards_across_attempts() -> None:
    t = Timeline()
    t.mark(0, "attempt_start", 0)
    t.train(0, 0, 10, (1000, 1100))  # the job began training at step 1000
    t.mark(0, "attempt_end", 10, status="failed")
    t.mark(1, "attempt_start", 20)
    t.train(1, 20, 30, (900, 1000))  # below 1000: no checkpoint of this job holds it
    t.train(1, 30, 40, (1000, 1100))  # a resume at 1000 is ordinary repeated training
    t.mark(1, "attempt_end", 40, status="completed")
    job = attribute_job(t.events)
    assert job.anomalies == {"train_steps_backwards": 1}
    # still attributed by the rule: 20-30 f = clamp((1000 - 900) / 100) = 1 -> repeated
    # (H = 1100); 30-40 f = (1100 - 1000) / 100 = 1 -> repeated
    assert job.lost_s["repeated_training"] == 20.0


def test_anomaly_kinds_are_stable_snake_case_keys() -> None:
    assert all(key.isidentifier() and key == key.lower() for key in ANOMALY_KINDS)
    assert all(ANOMALY_KINDS.values())


# --- where §3 does NOT make splitting a span invariant (the property test avoids these) -------


def test_split_counterexample_a_nested_span_crossing_the_split() -> None:
    def lost(eval_spans: list[tuple[float, float]]) -> dict[str, float]:
        t = Timeline()
        t.mark(0, "attempt_start", 0)
        for start, end in eval_spans:
            t.span(0, "eval", start, end)
        t.span(0, "publish", 2, 4)  # same rank, nested in eval
        t.mark(0, "attempt_end", 10, status="completed")
        return attribute_job(t.events).lost_s

    # whole: eval [0, 10) contains publish [2, 4): publish 2, eval 8
    assert lost([(0, 10)]) == {"eval": 8.0, "publish": 2.0}
    # split at 3: in 2-3 and 3-4 neither eval half contains publish nor the reverse, so the
    # two names share those 2 s equally: eval 2 + 1 + 6 = 9, publish 1
    assert lost([(0, 3), (3, 10)]) == {"eval": 9.0, "publish": 1.0}


def test_split_counterexample_steps_not_in_proportion_to_time() -> None:
    def repeated(train: list[tuple[float, float, int, int]]) -> float:
        t = Timeline()
        t.mark(0, "attempt_start", 0)
        t.train(0, 0, 10, (0, 100))
        for start, end, s0, s1 in train:
            t.train(0, start, end, (s0, s1))
        t.mark(0, "attempt_end", 20, status="completed")
        return attribute_job(t.events).lost_s.get("repeated_training", 0.0)

    # whole [10, 20) steps 50-150, H = 100: f = 0.5 -> 5 s
    assert repeated([(10, 20, 50, 150)]) == 5.0
    # split in proportion (time 15 <-> step 100): 5 s (f = 1) + 0 s (H = 100 = s0)
    assert repeated([(10, 15, 50, 100), (15, 20, 100, 150)]) == 5.0
    # split out of proportion (time 12 <-> step 100): 2 s (f = 1) + 0 s
    assert repeated([(10, 12, 50, 100), (12, 20, 100, 150)]) == 2.0
