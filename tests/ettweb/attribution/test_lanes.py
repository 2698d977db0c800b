"""The job page's stored pictures (``ettweb.attribution.lanes``): bounded category timeline,
rank lanes that merge ranks which agree and split ranks which differ. No Django."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings

from ettweb.attribution.engine import AttemptWindow, Segment, attribute_job
from ettweb.attribution.lanes import (
    LANE_TARGET,
    MAX_PIECES,
    category_timeline,
    grid,
    job_lanes,
    nice_width,
    rank_label,
    rank_lanes,
)
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.rank_events import SLOW_EXTRA_S, ranked_job
from tests.ettweb.attribution.test_properties import job_events
from tests.examples import examples


def window(start: float, end: float, attempt: int = 0) -> AttemptWindow:
    return AttemptWindow(attempt=attempt, start=start, end=end, status="completed", gpus=1)


# --------------------------------------------------------------------------- rank lanes

def test_ranks_that_agree_share_one_lane_labelled_with_their_ranks() -> None:
    job = ranked_job(8)
    lanes = job_lanes(attribute_job(job.events).attempts, job.events)
    assert [(lane.attempt, lane.label) for lane in lanes] == [(0, "0-7"), (1, "0-7")]
    runs = [state for state, _, _ in lanes[0].runs]
    assert runs == ["rendezvous", "model_init", "compile", "train", "checkpoint_save", "train"]
    assert lanes[0].runs[0][1:] == (0.0, 5.0) and lanes[0].runs[-1][2] == 400.0


def test_ranks_that_differ_are_split_and_the_rest_stay_together() -> None:
    job = ranked_job(16, slow={3, 9, 10})
    lanes = [lane for lane in job_lanes(attribute_job(job.events).attempts, job.events)
             if lane.attempt == 0]
    assert [lane.label for lane in lanes] == ["0-2, 4-8, 11-15", "3, 9-10"]
    slow = dict((state, end - start) for state, start, end in lanes[1].runs)
    fast = dict((state, end - start) for state, start, end in lanes[0].runs)
    assert slow["model_init"] == pytest.approx(fast["model_init"] + SLOW_EXTRA_S, abs=1.0)


def test_jitter_within_a_bin_does_not_split_lanes() -> None:
    """512 ranks whose boundaries disagree by up to 0.3 s: a handful of lanes, not 512."""
    job = ranked_job(512, jitter_s=0.3, seed=7)
    lanes = job_lanes(attribute_job(job.events).attempts, job.events)
    per_attempt = Counter(lane.attempt for lane in lanes)
    assert set(per_attempt) == {0, 1}
    assert all(count <= LANE_TARGET for count in per_attempt.values()), per_attempt
    for attempt in (0, 1):
        ranks = [r for lane in lanes if lane.attempt == attempt for r in lane.ranks]
        assert sorted(ranks) == list(range(512))  # every rank in exactly one lane


def test_ranks_that_differ_by_little_coarsen_the_grid_to_a_few_lanes() -> None:
    """40 ranks ending compile 2 s apart: 40 lanes on the finest grid (2-s bins of a
    1,000-s attempt), so the lanes' grid is coarsened until at most LANE_TARGET differ."""
    t = Timeline()
    for rank in range(40):
        t.span(0, "compile", 0, 500 + 2 * rank, rank=rank)
        t.train(0, 500 + 2 * rank, 1000, (0, 10), rank=rank)
    lanes = rank_lanes(window(0, 1000), t.events)
    assert grid(0, 1000, MAX_PIECES) == (2.0, 500)
    assert 1 < len(lanes) <= LANE_TARGET and lanes[0].bin_s == 10.0
    assert sorted(r for lane in lanes for r in lane.ranks) == list(range(40))
    ends = [lane.runs[0][2] for lane in lanes]  # where compile ends, 10-s resolution
    assert ends == sorted(ends) and ends[0] == 500.0 and ends[-1] == 580.0


def test_gaps_too_short_for_a_bin_do_not_split_lanes() -> None:
    """Rank 1 re-opens its spans 0.3 s late (1-s bins of a 500-s attempt): it agrees with
    rank 0, whose spans touch; a 3-s pause of rank 2 is a real difference."""
    t = Timeline()
    for rank, gap in ((0, 0.0), (1, 0.3), (2, 0.0)):
        t.span(0, "model_init", 0, 100, rank=rank)
        t.span(0, "compile", 100 + gap, 200, rank=rank)
        for i in range(5):
            pause = 3.0 if rank == 2 and i == 2 else gap
            t.train(0, 200 + 60 * i + pause, 200 + 60 * (i + 1), (10 * i, 10 * (i + 1)),
                    rank=rank)
    lanes = rank_lanes(window(0, 500), t.events)
    assert [lane.label for lane in lanes] == ["0-1", "2"]
    assert lanes[0].runs == (("model_init", 0.0, 100.0), ("compile", 100.0, 200.0),
                             ("train", 200.0, 500.0))
    assert lanes[1].runs[-2:] == (("train", 200.0, 320.0), ("train", 323.0, 500.0))


def test_a_rank_shows_its_innermost_blocking_phase_and_train_wins() -> None:
    t = Timeline()
    t.span(0, "model_init", 0, 100)             # outer
    t.span(0, "sharding_plan", 10, 30)          # nested: the innermost while it runs
    t.span(0, "publish", 40, 120, blocking=False)  # background: hidden by blocking/train
    t.train(0, 60, 90, (0, 10))                 # train beats the blocking model_init
    t.span(0, "checkpoint_save", 130, 140, blocking=False)  # alone: shown
    (lane,) = rank_lanes(window(0, 200), t.events)
    assert [state for state, _, _ in lane.runs] == [
        "model_init", "sharding_plan", "model_init", "train", "model_init", "publish",
        "checkpoint_save"]
    bounds = [(start, end) for _, start, end in lane.runs]
    assert bounds == [(0, 10), (10, 30), (30, 60), (60, 90), (90, 100), (100, 120), (130, 140)]


def test_a_span_named_productive_is_not_drawn_as_training() -> None:
    t = Timeline()
    t.span(0, "productive", 0, 10)
    (lane,) = rank_lanes(window(0, 10), t.events)
    assert lane.runs == (("unattributed", 0.0, 10.0),)


def test_spans_are_clamped_into_the_attempt_window() -> None:
    t = Timeline()
    t.span(0, "compile", -50, 20)
    t.span(0, "eval", 95, 300, rank=1)
    t.span(0, "data_init", 500, 600, rank=2)  # wholly outside: rank 2 has no lane
    lanes = rank_lanes(window(0, 100), t.events)
    assert [(lane.label, lane.runs) for lane in lanes] == [
        ("0", (("compile", 0.0, 20.0),)), ("1", (("eval", 95.0, 100.0),))]


def test_a_bin_keeps_the_state_that_covers_most_of_it() -> None:
    """A 10,000 s attempt has 20-s bins: a 3-s blip inside a bin of training disappears,
    a 15-s one takes its bin."""
    t = Timeline()
    t.train(0, 0, 5000, (0, 500))
    t.span(0, "eval", 5001, 5004)
    t.train(0, 5004, 7000, (500, 700))
    t.span(0, "eval", 7005, 7020)
    t.train(0, 7020, 10_000, (700, 1000))
    (lane,) = rank_lanes(window(0, 10_000), t.events)
    assert lane.bin_s == 20.0
    assert lane.runs == (("train", 0.0, 7000.0), ("eval", 7000.0, 7020.0),
                         ("train", 7020.0, 10_000.0))


def test_rank_labels_read_as_ranges() -> None:
    assert rank_label([5, 0, 1, 2, 3, 7, 8, 130]) == "0-3, 5, 7-8, 130"
    assert rank_label(range(256)) == "0-255"
    assert rank_label([4]) == "4"


def test_lanes_keep_every_rank_once_and_runs_inside_the_window() -> None:
    job = ranked_job(12, jitter_s=2.0, seed=3, slow={5})
    attribution = attribute_job(job.events)
    windows = {w.attempt: w for w in attribution.attempts}
    for lane in job_lanes(attribution.attempts, job.events):
        w = windows[lane.attempt]
        for (_, _, e0), (_, s1, _) in itertools.pairwise(lane.runs):
            assert e0 <= s1
        assert all(w.start <= s < e <= w.end for _, s, e in lane.runs)


# --------------------------------------------------------------------------- the timeline

def test_the_worked_example_timeline_is_exact() -> None:
    rows = category_timeline(attribute_job(worked_example().events).segments)
    assert [(row.attempt, row.bin_s) for row in rows] == [(0, 0.0), (1, 0.0)]
    assert rows[0].pieces == (("process_group_init", 1000, 1004), ("compile", 1004, 1010),
                              ("productive", 1010, 1070), ("checkpoint_save", 1070, 1072),
                              ("productive", 1072, 1080), ("failure", 1080, 1083))
    # The restart gap is drawn on the attempt after it; repeated steps before new ones.
    assert rows[1].pieces == (("restart_gap", 1083, 1090), ("checkpoint_load", 1090, 1093),
                              ("repeated_training", 1093, 1101), ("productive", 1101, 1113))


def test_a_long_timeline_is_cut_to_a_bounded_grid_keeping_what_covers_most() -> None:
    """5,000 alternations of 58 s of training and a 2-s checkpoint: 10,000 pieces in, at
    most MAX_PIECES out, and at this scale (500-s bins) training covers every bin."""
    segments = []
    for i in range(5000):
        segments.append(Segment(60.0 * i, 60.0 * i + 58, 0, 1, {"productive": 58.0}))
        segments.append(Segment(60.0 * i + 58, 60.0 * (i + 1), 0, 1, {"checkpoint_save": 2.0}))
    (row,) = category_timeline(segments)
    assert row.bin_s == 500.0 and len(row.pieces) <= MAX_PIECES
    assert row.pieces == (("productive", 0.0, 300_000.0),)


def test_shared_pieces_are_laid_side_by_side_and_merged_with_neighbours() -> None:
    segments = [Segment(0, 10, 0, 1, {"compile": 5.0, "data_init": 5.0}),
                Segment(10, 20, 0, 1, {"data_init": 10.0})]
    (row,) = category_timeline(segments)
    assert row.pieces == (("compile", 0, 5.0), ("data_init", 5.0, 20))


@settings(max_examples=examples(200), deadline=None)
@given(job_events())
def test_the_timeline_tiles_each_row_with_the_engines_seconds(events: list[dict[str, Any]],
                                                               ) -> None:
    job = attribute_job(events)
    rows = {row.attempt: row for row in category_timeline(job.segments)}
    for attempt, segments in itertools.groupby(job.segments, key=lambda s: s.attempt):
        parts = list(segments)
        row = rows[attempt]
        assert row.pieces[0][1] == parts[0].start and row.pieces[-1][2] == parts[-1].end
        for (a, _, end), (b, start, _) in itertools.pairwise(row.pieces):
            assert end == pytest.approx(start) and a != b
        wanted: dict[str, float] = {}
        for segment in parts:
            for category, seconds in segment.shares.items():
                if seconds > 0:
                    wanted[category] = wanted.get(category, 0.0) + seconds
        got: dict[str, float] = {}
        for category, start, end in row.pieces:
            got[category] = got.get(category, 0.0) + end - start
        assert got == pytest.approx(wanted, abs=1e-6)


@settings(max_examples=examples(200), deadline=None)
@given(job_events())
def test_every_rank_with_a_span_in_its_window_has_one_lane(events: list[dict[str, Any]],
                                                           ) -> None:
    job = attribute_job(events)
    lanes = job_lanes(job.attempts, events)
    for window_ in job.attempts:
        wanted = {e["rank"] for e in events if e["kind"] == "span"
                  and e["attempt"] == window_.attempt
                  and min(e["end"], window_.end) > max(e["start"], window_.start)}
        got = [r for lane in lanes if lane.attempt == window_.attempt for r in lane.ranks]
        assert sorted(got) == sorted(wanted)


# --------------------------------------------------------------------------- the grid

@pytest.mark.parametrize(("seconds", "width"), [
    (0.1383, 0.2), (1.0, 1.0), (1.01, 2.0), (4.0, 5.0), (16.7, 20.0), (600.0, 1000.0)])
def test_bins_have_round_widths(seconds: float, width: float) -> None:
    assert nice_width(seconds) == pytest.approx(width)


def test_the_grid_never_has_more_bins_than_asked() -> None:
    for duration in (1.0, 83.0, 113.0, 3599.0, 86_400.0, 7 * 86_400.0 + 1):
        width, bins = grid(1000.0, 1000.0 + duration, MAX_PIECES)
        assert 1 <= bins <= MAX_PIECES and width * bins >= duration - 1e-6
