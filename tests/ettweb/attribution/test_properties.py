"""Properties that must hold for any valid timeline, however inconsistent (§1, §3)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from math import floor
from typing import Any

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from collector.schema import validate_event
from ettweb.attribution.engine import (
    ANOMALY_KINDS,
    JobAttribution,
    attribute,
    attribute_job,
    per_day,
)
from tests.examples import examples

PHASES = ["train", "compile", "eval", "checkpoint_save", "publish"]
STATUSES = ["completed", "failed", "preempted", "cancelled"]
# Quarter seconds: exact in binary floating point, yet not all whole numbers.
times = st.integers(min_value=0, max_value=160).map(lambda quarters: quarters / 4)


@st.composite
def span_events(draw: st.DrawFn, attempt: int) -> dict[str, Any]:
    phase = draw(st.sampled_from(PHASES))
    start = draw(times)
    event: dict[str, Any] = {
        "kind": "span", "attempt": attempt, "phase": phase, "start": start,
        "end": start + draw(times) / 2, "rank": draw(st.integers(0, 2)),
        "blocking": draw(st.booleans()),
    }
    if phase == "train":
        step_start = draw(st.integers(0, 100))
        event["step_start"] = step_start
        event["step_end"] = step_start + draw(st.integers(0, 50))
    return event


@st.composite
def mark_events(draw: st.DrawFn, attempt: int) -> dict[str, Any]:
    mark = draw(st.sampled_from(["attempt_start", "attempt_end", "heartbeat"]))
    attrs: dict[str, Any] = {}
    if mark == "attempt_start" and draw(st.booleans()):
        attrs["gpus"] = draw(st.integers(1, 8))
    if mark == "attempt_end":
        attrs["status"] = draw(st.sampled_from(STATUSES))
    event = {"kind": "mark", "attempt": attempt, "mark": mark, "ts": draw(times), "attrs": attrs}
    if mark == "heartbeat":  # a hard kill's evidence (§3 rule 3), on any rank
        event["rank"] = draw(st.integers(0, 2))
        if draw(st.booleans()):
            event["step"] = draw(st.integers(0, 150))
    return event


@st.composite
def job_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    raw: list[dict[str, Any]] = []
    for attempt in range(draw(st.integers(1, 3))):
        raw += draw(st.lists(span_events(attempt), max_size=8))
        raw += draw(st.lists(mark_events(attempt), min_size=1, max_size=3))
    return [validate_event({"v": 1, "id": f"e{i}", "job": "j", **e}) for i, e in enumerate(raw)]


def _lost_total(job: JobAttribution, gpu: bool = False) -> float:
    return sum((job.lost_gpu_s if gpu else job.lost_s).values())


@settings(max_examples=examples(300), deadline=None)
@given(job_events())
def test_categories_sum_to_wall(events: list[dict[str, Any]]) -> None:
    job = attribute_job(events)
    assert job.productive_s + _lost_total(job) == pytest.approx(job.wall_s, abs=1e-9)
    assert job.productive_gpu_s + _lost_total(job, gpu=True) == pytest.approx(
        job.wall_gpu_s, abs=1e-9)
    assert all(seconds > 0 for seconds in job.lost_s.values())
    assert 0.0 <= job.ett_pct <= 100.0
    per_day_total = sum(sum(day.values()) for day in job.per_day_gpu_s().values())
    assert per_day_total == pytest.approx(job.wall_gpu_s, abs=1e-9)


@settings(max_examples=examples(300), deadline=None)
@given(job_events())
def test_segments_tile_the_job_window(events: list[dict[str, Any]]) -> None:
    job = attribute_job(events)
    segments = job.segments
    if not segments:
        assert job.wall_s == 0.0
        return
    assert segments[0].start == job.attempts[0].start
    assert segments[-1].end == job.attempts[-1].end
    for before, after in itertools.pairwise(segments):
        assert before.end == after.start
    for segment in segments:
        assert segment.end > segment.start
        assert sum(segment.shares.values()) == pytest.approx(segment.duration_s, abs=1e-9)


@settings(max_examples=examples(200), deadline=None)
@given(job_events(), st.randoms(use_true_random=False))
def test_independent_of_order_and_duplicates(
    events: list[dict[str, Any]], rng: random.Random
) -> None:
    reference = attribute_job(events)
    shuffled = list(events)
    rng.shuffle(shuffled)
    assert attribute_job(shuffled) == reference
    repeated = shuffled + rng.sample(events, k=len(events) // 2 + 1)
    rng.shuffle(repeated)
    again = attribute_job(repeated)
    assert again.duplicates == len(events) // 2 + 1
    assert dataclasses.replace(again, duplicates=0) == reference
    assert attribute(repeated).jobs == [again]


def _naive_high_water(span: dict[str, Any], train: list[dict[str, Any]]) -> int:
    return max((o["step_end"] for o in train if o is not span and o["end"] <= span["start"]),
               default=0)


def _naive_piece(active: list[dict[str, Any]], train: list[dict[str, Any]],
                 ) -> dict[str, float] | None:
    """§3.4.1-3.3.3 read literally for one piece, as fractions; None if nothing is active."""
    trains = [s for s in active if s["phase"] == "train"]
    if trains:
        span = min(trains, key=lambda s: (s["rank"], s["start"], s["id"]))
        s0, s1 = span["step_start"], span["step_end"]
        h = _naive_high_water(span, train)
        f = 0.0 if s1 == s0 else min(1.0, max(0.0, (min(s1, h) - s0) / (s1 - s0)))
        return {"productive": 1 - f, "repeated_training": f}
    blocking = [s for s in active if s["blocking"]]
    kept = [s for s in blocking if not any(
        o["rank"] == s["rank"] and s["cs"] <= o["cs"] and o["ce"] <= s["ce"]
        and (o["cs"], o["ce"]) != (s["cs"], s["ce"]) for o in blocking)]
    names = {s["phase"] for s in kept} or {s["phase"] for s in active}
    return {name: 1 / len(names) for name in names} if names else None


def _naive_implied(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """§3 rule 3 read literally, per attempt and rank (an oracle for ``implied.py``)."""
    found = []
    beats = [e for e in events if e["kind"] == "mark" and e.get("step") is not None]
    for attempt, rank in sorted({(b["attempt"], b["rank"]) for b in beats}):
        mine = [b for b in beats if (b["attempt"], b["rank"]) == (attempt, rank)]
        h = max(mine, key=lambda b: (b["ts"], b["step"]))
        t, k = h["ts"], h["step"]
        if any(b["ts"] < t and b["step"] > k for b in mine):
            continue  # a step going backwards implies nothing
        spans = [e for e in events if e["kind"] == "span" and e["attempt"] == attempt
                 and e["rank"] == rank]
        ended = [s for s in spans if s["end"] <= t and s["phase"] == "train"]
        if not ended or any(s["phase"] == "train" and s["start"] <= t < s["end"]
                            for s in spans):
            continue
        e = max(ended, key=lambda s: (s["end"], s["step_end"]))["step_end"]
        if k > e:
            u = max(s["end"] for s in spans if s["end"] <= t)
            found.append({"id": f"implied{attempt}/{rank}", "kind": "span", "phase": "train",
                          "attempt": attempt, "rank": rank, "start": u, "end": t,
                          "step_start": e, "step_end": k, "blocking": True})
    return found


def _naive_totals(events: list[dict[str, Any]], job: JobAttribution) -> dict[str, float]:
    """An O(n^2) oracle for the sweep, on the engine's own windows (tested by the goldens)."""
    spans = [dict(e) for e in events if e["kind"] == "span"] + _naive_implied(events)
    train = [s for s in spans if s["phase"] == "train"]
    totals: dict[str, float] = {}
    for window in job.attempts:
        mine = [s for s in spans if s["attempt"] == window.attempt]
        for s in mine:
            s["cs"] = min(max(s["start"], window.start), window.end)
            s["ce"] = min(max(s["end"], window.start), window.end)
        cuts = sorted({window.start, window.end, window.last_event}
                      | {s["cs"] for s in mine} | {s["ce"] for s in mine})
        for a, b in itertools.pairwise(cuts):
            active = [s for s in mine if s["cs"] <= a and s["ce"] >= b]
            shares = _naive_piece(active, train)
            if shares is None:
                failed = window.status in ("failed", "preempted", "lost")
                shares = {"failure" if failed and a >= window.last_event else "unattributed": 1}
            for name, fraction in shares.items():
                totals[name] = totals.get(name, 0.0) + fraction * (b - a)
    for before, after in zip(job.attempts, job.attempts[1:], strict=False):
        totals["restart_gap"] = totals.get("restart_gap", 0.0) + after.start - before.end
    return {name: seconds for name, seconds in totals.items() if seconds > 1e-12}


@settings(max_examples=examples(300), deadline=None)
@given(job_events())
def test_sweep_matches_a_naive_reading_of_the_rules(events: list[dict[str, Any]]) -> None:
    job = attribute_job(events)
    engine = {**job.lost_s, "productive": job.productive_s}
    engine = {name: seconds for name, seconds in engine.items() if seconds > 1e-12}
    assert engine == pytest.approx(_naive_totals(events, job), abs=1e-9)


# --- rollups, recoveries and anomalies ---------------------------------------------------------


@settings(max_examples=examples(200), deadline=None)
@given(job_events())
def test_per_day_rollups_sum_to_the_job_totals_per_category(
    events: list[dict[str, Any]],
) -> None:
    job = attribute_job(events)
    for gpu_weighted, productive, lost in ((True, job.productive_gpu_s, job.lost_gpu_s),
                                           (False, job.productive_s, job.lost_s)):
        summed: dict[str, float] = {}
        for day in per_day(job.segments, gpu_weighted=gpu_weighted).values():
            for category, seconds in day.items():
                summed[category] = summed.get(category, 0.0) + seconds
        expected = {**lost, "productive": productive}
        assert {k: v for k, v in summed.items() if abs(v) > 1e-9} == pytest.approx(
            {k: v for k, v in expected.items() if abs(v) > 1e-9}, abs=1e-9)


@settings(max_examples=examples(300), deadline=None)
@given(job_events())
def test_recoveries_follow_time_to_recover_and_anomalies_are_known(
    events: list[dict[str, Any]],
) -> None:
    job = attribute_job(events)
    assert len(job.recoveries) == len(job.time_to_recover_s) <= job.failures
    for recovery, value in zip(job.recoveries, job.time_to_recover_s, strict=True):
        assert recovery.end - recovery.start == value >= 0.0
        assert sum(recovery.by_category.values()) == pytest.approx(value, abs=1e-9)
        assert all(seconds >= 0.0 for seconds in recovery.by_category.values())
        failed = {a.attempt for a in job.attempts if a.status in ("failed", "preempted", "lost")}
        assert recovery.attempt in failed
    assert [r.attempt for r in job.recoveries] == sorted(r.attempt for r in job.recoveries)
    assert set(job.anomalies) <= set(ANOMALY_KINDS)
    assert all(count > 0 for count in job.anomalies.values())


# --- splitting a span into two adjacent spans of the same phase --------------------------------
#
# What §3 makes hold, and so what is tested: the span lies inside its attempt window (f is
# spread evenly over the clamped span, so a clamped whole and two clamped halves repeat
# different seconds); the split point m does not touch another span of the same rank (the
# innermost rule compares bounds, so a span crossing m would stop being contained, or start
# to contain a half); and for `train` the steps split in proportion to time (f is linear in
# steps, so two proportional halves repeat exactly the seconds the whole did), no other train
# span ends in (start, m] or starts in [m, end) (it would see the first half's step_end in
# H), and no lower-rank train span overlaps it (the span must decide all of its own pieces).
# test_rules.py::test_split_counterexample_* shows other numbers when one is broken.


def _touches(other: dict[str, Any], m: float) -> bool:
    return other["start"] <= m <= other["end"]


def _split_points(span: dict[str, Any], events: list[dict[str, Any]], job: JobAttribution,
                  ) -> list[tuple[float, int | None]]:
    """Split times m (and the step there, for train) that leave §3's numbers unchanged."""
    start, end = span["start"], span["end"]
    window = next(a for a in job.attempts if a.attempt == span["attempt"])
    others = [e for e in events if e["kind"] == "span" and e is not span]
    if not window.start <= start < end <= window.end or (span["phase"] == "train" and any(
            o["phase"] == "train" and o["rank"] < span["rank"]
            and o["start"] < end and o["end"] > start for o in others)):
        return []
    if span["phase"] == "train":
        s0, s1 = span["step_start"], span["step_end"]
        candidates: list[tuple[float, int | None]] = [
            (start + (end - start) * k / (s1 - s0), s0 + k) for k in range(1, s1 - s0)]
    else:
        candidates = [(start + (end - start) * q / 4, None) for q in (1, 2, 3)]
    valid = []
    for m, step in candidates:
        if not start < m < end:
            continue
        if any(o["rank"] == span["rank"] and _touches(o, m) for o in others):
            continue
        if span["phase"] == "train" and any(
                o["phase"] == "train" and (start < o["end"] <= m or m <= o["start"] < end)
                for o in others):
            continue
        valid.append((m, step))
    return valid


def _split(span: dict[str, Any], m: float, step: int | None) -> list[dict[str, Any]]:
    first, second = {**span, "end": m}, {**span, "id": span["id"] + "-b", "start": m}
    if step is not None:
        first["step_end"] = second["step_start"] = step
    return [first, second]


@settings(max_examples=examples(300), deadline=None)
@given(job_events(), st.data())
def test_independent_of_splitting_a_span_into_two_of_the_same_phase(
    events: list[dict[str, Any]], data: st.DataObject,
) -> None:
    whole = attribute_job(events)
    splittable = [(e, points) for e in events if e["kind"] == "span"
                  for points in [_split_points(e, events, whole)] if points]
    assume(splittable)
    span, points = data.draw(st.sampled_from(splittable))
    m, step = data.draw(st.sampled_from(points))
    event(f"split a {'train' if step is not None else 'non-train'} span")
    split = [piece for e in events for piece in (_split(e, m, step) if e is span else [e])]
    halves = attribute_job(split)
    assert halves.wall_s == whole.wall_s
    assert halves.productive_s == pytest.approx(whole.productive_s, abs=1e-9)
    assert {k: v for k, v in halves.lost_s.items() if v > 1e-9} == pytest.approx(
        {k: v for k, v in whole.lost_s.items() if v > 1e-9}, abs=1e-9)
    assert halves.wall_gpu_s == pytest.approx(whole.wall_gpu_s, abs=1e-9)
    assert halves.repeated_steps == whole.repeated_steps
    assert halves.time_to_start_s == whole.time_to_start_s
    assert halves.time_to_recover_s == pytest.approx(whole.time_to_recover_s, abs=1e-9)
    assert halves.failures == whole.failures


def _near(a: dict[str, float], b: dict[str, float]) -> bool:
    keys = {k for k, v in {**a, **b}.items() if abs(a.get(k, 0.0)) > 1e-9
            or abs(b.get(k, 0.0)) > 1e-9}
    return all(a.get(k, 0.0) == pytest.approx(b.get(k, 0.0), abs=1e-9) for k in keys)


@settings(max_examples=examples(300), deadline=None)
@given(job_events(), st.sampled_from([0.25, 1.0, 3.75, 10.0, 40.0, 1000.0]))
def test_a_sweep_in_time_chunks_gives_the_whole_sweeps_numbers(
        events: list[dict[str, Any]], chunk_s: float) -> None:
    """Each chunk sees only the spans overlapping it (issue 15's unit of recomputation),
    and the chunks' sums are the whole job's: every category, GPU-weighted or not, every
    UTC day, every recovery and its parts; only the segments are cut at chunk
    boundaries."""
    whole = attribute_job(events)
    chunked = attribute_job(events, chunk_s=chunk_s)
    assert chunked.attempts == whole.attempts
    assert chunked.wall_s == whole.wall_s
    assert chunked.productive_s == pytest.approx(whole.productive_s, abs=1e-9)
    assert chunked.productive_gpu_s == pytest.approx(whole.productive_gpu_s, abs=1e-9)
    assert chunked.wall_gpu_s == pytest.approx(whole.wall_gpu_s, abs=1e-9)
    assert _near(chunked.lost_s, whole.lost_s)
    assert _near(chunked.lost_gpu_s, whole.lost_gpu_s)
    for gpu_weighted in (True, False):
        days = per_day(whole.segments, gpu_weighted=gpu_weighted)
        chunk_days = per_day(chunked.segments, gpu_weighted=gpu_weighted)
        assert set(chunk_days) == set(days)
        assert all(_near(chunk_days[day], days[day]) for day in days)
    assert (chunked.repeated_steps, chunked.failures, chunked.time_to_start_s) == (
        whole.repeated_steps, whole.failures, whole.time_to_start_s)
    assert chunked.time_to_recover_s == whole.time_to_recover_s
    assert len(chunked.recoveries) == len(whole.recoveries)
    for mine, theirs in zip(chunked.recoveries, whole.recoveries, strict=True):
        assert (mine.attempt, mine.start, mine.end) == (theirs.attempt, theirs.start,
                                                        theirs.end)
        # Training inside a recovery is repeated however segments are cut (§3.8).
        assert _near(mine.by_category_gpu_s, theirs.by_category_gpu_s)
        assert _near(mine.by_category, theirs.by_category)
    for segment in chunked.segments:  # no swept piece crosses a chunk boundary
        if set(segment.shares) == {"restart_gap"}:
            continue  # the gap between two attempts is no attempt's: one piece, unswept
        first = floor(segment.start / chunk_s)
        inside = [k * chunk_s for k in range(first, floor(segment.end / chunk_s) + 2)
                  if segment.start < k * chunk_s < segment.end]
        assert inside == [], (segment, chunk_s)


def test_chunk_s_must_be_positive() -> None:
    events = [validate_event({"v": 1, "id": "m", "job": "j", "kind": "mark", "attempt": 0,
                              "mark": "attempt_start", "ts": 0.0})]
    with pytest.raises(ValueError, match="chunk_s must be positive"):
        attribute_job(events, chunk_s=0.0)
