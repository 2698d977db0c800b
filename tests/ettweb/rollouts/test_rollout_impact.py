"""Rollout impact (ETT_SPEC §6) on small fleets whose every number is worked out here by hand.

Jobs live inside UTC days (or cross one on purpose), so each job's per-day rows are known
exactly: a job with ``compile`` c hours and ``train`` t hours on g GPUs contributes
(c + t) x g wall GPU-hours and t x g productive ones to its day.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import ImpactQuery, WindowError, calculate
from ettweb.queries.impact import (
    ImpactResult,
    rollout_windows,
)
from ettweb.rollouts.models import Rollout
from ettweb.statistics.estimators import Group, bootstrap
from tests.conftest import mark, span

pytestmark = pytest.mark.django_db

H = 3600.0
_ids = itertools.count()


def _day(d: int) -> float:
    """Epoch seconds of 2026-03-<d> 00:00 UTC."""
    return datetime(2026, 3, d, tzinfo=UTC).timestamp()


def day_job(job: str, d: int, gpus: int, team: str, lost: tuple[str, float], train_h: float,
            *, start_h: float = 0.0) -> list[dict[str, Any]]:
    """One attempt on day ``d``: ``lost`` phase for its hours, then training; completed."""
    phase, lost_h = lost
    t0 = _day(d) + start_h * H
    events = [mark(job, 0, "attempt_start", t0, attrs={"gpus": gpus, "team": team,
                                                       "model": "dlrm", "cluster": "east"})]
    if lost_h:
        events.append(span(job, 0, phase, t0, t0 + lost_h * H))
    t1 = t0 + lost_h * H
    events.append(span(job, 0, "train", t1, t1 + train_h * H, step_start=0, step_end=100))
    events.append(mark(job, 0, "attempt_end", t1 + train_h * H, attrs={"status": "completed"}))
    return events


def store(events: list[dict[str, Any]]) -> None:
    import json

    lines = [json.dumps({"v": 1, "id": f"ev{next(_ids)}", **e}) for e in events]
    ingest_batch(lines)


def rollout(scope: dict[str, Any], at: datetime | None = None, pk: int | None = None,
            component: str = "pt2_compiler") -> Rollout:
    return Rollout.objects.create(pk=pk, name="faster compile", component=component,
                                  at=at or datetime(2026, 3, 10, 12, tzinfo=UTC), scope=scope)


def impact(r: Rollout, window: int = 2, **kw: Any) -> ImpactResult:
    result = calculate(ImpactQuery(r.pk, window, **kw))
    assert result is not None
    return result


@pytest.fixture
def small_fleet() -> None:
    """Rollout day 2026-03-10; W = 2: before = Mar 8-9, after = Mar 11-12."""
    events: list[dict[str, Any]] = []
    events += day_job("t1", 8, 2, "ads", ("compile", 2), 8)           # 20 wall, 16 prod
    events += day_job("t2", 9, 4, "ads", ("checkpoint_save", 1), 9)   # 40, 36
    events += day_job("t3", 11, 2, "ads", ("compile", 1), 9)          # 20, 18
    events += day_job("t4", 12, 4, "ads", ("checkpoint_save", 0.5), 9.5)  # 40, 38
    # t5 trains from Mar 9 20:00 to Mar 11 04:00 on 1 GPU: 4 h before, 24 h on the rollout
    # day (in neither window), 4 h after.
    events += day_job("t5", 9, 1, "ads", ("compile", 0), 32, start_h=20)
    events += day_job("t6", 10, 8, "ads", ("compile", 5), 5)          # rollout day only
    events += day_job("c1", 8, 1, "feed", ("compile", 5), 5)          # 10, 5
    events += day_job("c2", 12, 1, "feed", ("compile", 4), 6)         # 10, 6
    events += day_job("c3", 11, 2, "", ("compile", 0), 10)            # 20, 20
    store(events)


def test_every_field_by_hand(small_fleet: None) -> None:
    r = rollout({"teams": ["ads"]})
    result = impact(r)
    assert result.windows.before == (date(2026, 3, 8), date(2026, 3, 9))
    assert result.windows.after == (date(2026, 3, 11), date(2026, 3, 12))
    assert result.windows.partial is False

    t = result.treated
    assert (t.jobs_before, t.jobs_after) == (3, 3)  # t1 t2 t5 / t3 t4 t5; t6 in neither
    assert t.before_ett_pct == pytest.approx(100 * 56 / 64)  # 87.5
    assert t.after_ett_pct == pytest.approx(100 * 60 / 64)   # 93.75
    assert t.change_pts == pytest.approx(6.25)
    assert t.change_rel == pytest.approx(93.75 / 87.5 - 1)
    assert t.ci95_pts is None  # 3 jobs < 5

    c = result.control
    assert c is not None
    assert (c.jobs_before, c.jobs_after) == (1, 2)
    assert c.before_ett_pct == pytest.approx(50.0)
    assert c.after_ett_pct == pytest.approx(100 * 26 / 30)
    assert result.did_pts == pytest.approx(6.25 - (100 * 26 / 30 - 50.0))
    assert result.did_ci95_pts is None
    assert result.verdict == "inconclusive"
    assert "too few jobs" in result.verdict_reason

    compiler, checkpointing = result.components["pt2_compiler"], result.components["checkpointing"]
    assert compiler.before_lost_pct == pytest.approx(100 * 4 / 64)   # t1: 2 h x 2 GPUs
    assert compiler.after_lost_pct == pytest.approx(100 * 2 / 64)    # t3: 1 h x 2 GPUs
    assert checkpointing.before_lost_pct == pytest.approx(100 * 4 / 64)
    assert checkpointing.after_lost_pct == pytest.approx(100 * 2 / 64)
    assert checkpointing.change_pts == pytest.approx(-100 * 2 / 64)
    assert result.components["reliability"].before_lost_pct == 0.0  # every component listed

    assert sorted(result.treated_before_ett) == pytest.approx([80.0, 90.0, 100.0])
    assert sorted(result.treated_after_ett) == pytest.approx([90.0, 95.0, 100.0])


def test_api_json_has_the_spec_fields(small_fleet: None) -> None:
    r = rollout({"teams": ["ads"]})
    body = impact(r).as_api()
    assert body["rollout"] == {"id": r.pk, "name": "faster compile", "component": "pt2_compiler",
                               "at": "2026-03-10T12:00:00Z", "scope": {"teams": ["ads"]}}
    assert body["before"] == ["2026-03-08", "2026-03-09"]
    assert body["after"] == ["2026-03-11", "2026-03-12"]
    assert set(body["treated"]) == {"jobs_before", "jobs_after", "before_ett_pct",
                                    "after_ett_pct", "change_pts", "change_rel", "ci95_pts"}
    assert body["treated"]["before_ett_pct"] == 87.5  # not rounded, exact here
    assert body["components"]["checkpointing"] == {
        "before_lost_pct": 100 * 4 / 64, "after_lost_pct": 100 * 2 / 64,
        "change_pts": -100 * 2 / 64, "change_rel": -0.5}
    assert body["verdict"] == "inconclusive"


def test_fleet_wide_rollout_has_no_control(small_fleet: None) -> None:
    result = impact(rollout({}))
    assert result.control is None and result.did_pts is None and result.did_ci95_pts is None
    t = result.treated
    assert (t.jobs_before, t.jobs_after) == (4, 5)  # + c1 / + c2, c3
    assert t.before_ett_pct == pytest.approx(100 * (56 + 5) / (64 + 10))
    assert t.after_ett_pct == pytest.approx(100 * (60 + 26) / (64 + 30))
    assert impact(rollout({})).as_api()["control"] is None


def test_job_pattern_and_lists_scope_like_the_team(small_fleet: None) -> None:
    by_team = impact(rollout({"teams": ["ads"]}))
    by_pattern = impact(rollout({"job_pattern": "t*"}))
    both = impact(rollout({"job_pattern": "t[1-5]", "models": ["dlrm"], "clusters": ["east"]}))
    for other in (by_pattern, both):
        assert other.treated == by_team.treated
        assert other.control == by_team.control
    nobody = impact(rollout({"teams": ["ads"], "job_pattern": "c*"}))  # fields AND
    assert not nobody.has_jobs
    assert nobody.treated.before_ett_pct is None and nobody.treated.change_pts is None


def test_partial_after_window_has_the_days_it_has(small_fleet: None) -> None:
    result = impact(rollout({"teams": ["ads"]}), window=3)
    assert result.windows.before == (date(2026, 3, 7), date(2026, 3, 9))
    assert result.windows.after == (date(2026, 3, 11), date(2026, 3, 12))  # last data day
    assert result.windows.partial is True
    assert result.treated.after_ett_pct == pytest.approx(93.75)  # same days hold the data

    future = impact(rollout({"teams": ["ads"]}, at=datetime(2026, 3, 12, 23, tzinfo=UTC)))
    assert future.windows.after is None and future.windows.partial
    assert future.as_api()["after"] is None
    assert future.treated.after_ett_pct is None and future.treated.change_pts is None


def test_windows_exclude_the_rollout_day_at_midnight_edges() -> None:
    at = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)  # the first second of Mar 10
    w = rollout_windows(at, 14, date(2026, 12, 1))
    assert w.rollout_day == date(2026, 3, 10)
    assert w.before == (date(2026, 2, 24), date(2026, 3, 9))
    assert w.after == (date(2026, 3, 11), date(2026, 3, 24))
    assert w.after_days == 14


@pytest.mark.parametrize("window", [0, 91, -1])
def test_window_outside_1_to_90_is_refused(window: int) -> None:
    with pytest.raises(WindowError, match="between 1 and 90"):
        ImpactQuery(1, window)


def test_unknown_rollout_is_none() -> None:
    assert calculate(ImpactQuery(987654)) is None


# --------------------------------------------------------------------------- the interval

@pytest.fixture
def interval_fleet() -> None:
    """Six treated jobs each side, all 80% before and 90% after (so every draw changes by
    exactly 10 points), and control jobs whose ETT% varies around no change."""
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"tb{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ta{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
    for n, (before_h, after_h) in enumerate([(1, 2), (3, 1), (2, 2), (4, 3), (0, 1), (2, 4)]):
        events += day_job(f"cb{n}", 8 + n % 2, 2, "feed", ("compile", before_h), 10 - before_h)
        events += day_job(f"ca{n}", 11 + n % 2, 2, "feed", ("compile", after_h), 10 - after_h)
    store(events)


def test_identical_jobs_give_a_degenerate_interval(interval_fleet: None) -> None:
    result = impact(rollout({"teams": ["ads"]}))
    assert result.treated.change_pts == pytest.approx(10.0)
    assert result.treated.ci95_pts == pytest.approx((10.0, 10.0))
    assert result.control is not None and result.control.ci95_pts is not None
    assert result.control.change_pts is not None
    c_low, c_high = result.control.ci95_pts
    assert c_low < result.control.change_pts < c_high
    # DiD draws are 10 - control draws, so its interval is the control's mirrored — up to
    # the percentile's interpolation, which weighs the two neighbouring draws the other way
    # round once mirrored (the draws depend on the seed, i.e. the rollout's id).
    assert result.did_ci95_pts == pytest.approx((10.0 - c_high, 10.0 - c_low), abs=1.0)
    # The control's ETT% swings by more than 10 points between draws (six jobs, each 60-100%),
    # so the DiD interval reaches below 0: the DiD decides, and it cannot tell.
    assert 10.0 - c_high < 0 < 10.0 - c_low
    assert result.verdict == "inconclusive"
    assert result.verdict_reason.startswith("the difference-in-differences interval")
    assert result.verdict_reason.endswith("contains 0")


def test_the_interval_is_the_same_on_every_load(interval_fleet: None) -> None:
    r = rollout({"teams": ["ads"]})
    first, second = impact(r), impact(r)
    assert first.control and second.control
    assert first.control.ci95_pts == second.control.ci95_pts
    assert first.did_ci95_pts == second.did_ci95_pts
    other = impact(rollout({"teams": ["ads"]}))  # another id seeds another generator
    assert other.control and other.control.ci95_pts != first.control.ci95_pts


def test_vectorized_bootstrap_equals_a_plain_loop() -> None:
    """The matrix-product bootstrap against the textbook loop, draw for draw: the ETT%
    change and the component's lost-share change of each draw come from the same jobs."""
    values = np.random.default_rng(3).uniform(1, 10, size=(40, 6))
    values[:, 1] *= 0.8
    values[:, 3] *= 0.9
    values[:, 4:] *= 0.05
    fast = bootstrap(values, np.random.default_rng(7), draws=300)
    rng = np.random.default_rng(7)
    slow = []
    for _ in range(300):
        picks = rng.integers(0, len(values), size=len(values))
        s = values[picks].sum(axis=0)
        slow.append((100 * s[3] / s[2] - 100 * s[1] / s[0],
                     100 * s[5] / s[2] - 100 * s[4] / s[0]))
    assert fast == pytest.approx(np.array(slow))


def test_verdict_reads_the_deciding_interval() -> None:
    from ettweb.queries.impact import GroupImpact
    from ettweb.queries.impact.verdicts import verdict_of

    def group(ci: tuple[float, float] | None, jobs: int = 9) -> GroupImpact:
        return GroupImpact(jobs, jobs, 80.0, 82.0, 2.0, 0.025, ci)

    assert verdict_of(group((0.5, 3.0)), None, None)[0] == "improved"  # fleet: treated decides
    assert verdict_of(group((-3.0, -0.1)), None, None)[0] == "regressed"
    assert verdict_of(group((-1.0, 3.0)), None, None)[0] == "inconclusive"
    # With a control, the DiD interval decides, even against a clear treated interval.
    verdict, reason = verdict_of(group((0.5, 3.0)), group((0.0, 1.0)), (-0.5, 2.0))
    assert verdict == "inconclusive" and reason.startswith("the difference-in-differences")
    verdict, reason = verdict_of(group((0.5, 3.0)), group(None, 3), None)
    assert verdict == "improved" and "control has too few jobs" in reason
    verdict, reason = verdict_of(group(None, 4), None, None)
    assert verdict == "inconclusive" and reason.startswith("too few jobs: 4 treated")


def _group(values: np.ndarray, in_before: np.ndarray | None = None,
           in_after: np.ndarray | None = None) -> Group:
    flags = np.ones(len(values), dtype=bool)
    return Group(values, flags if in_before is None else in_before,
                 flags if in_after is None else in_after,
                 np.full(len(values), 8, dtype=np.int64))


@pytest.mark.django_db
def test_kept_draws_are_exactly_a_fresh_bootstrap_and_follow_any_changed_sum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The draws kept by digest equal a bootstrap run from scratch with the same seed
    (treated first, then control, from one generator); a changed sum is a new bootstrap;
    another process (memory emptied) reads the stored draws instead of drawing again."""
    from ettweb.queries.impact import draws
    from ettweb.queries.impact.draws import group_draws
    from ettweb.rollouts.models import BootstrapDraws

    def group(seed: int, jobs: int) -> Group:
        return _group(np.random.default_rng(seed).uniform(1, 10, size=(jobs, 6)))

    treated, control = group(1, 12), group(2, 9)
    first, unkept = group_draws(99, treated, control, keep=True)  # the worker's
    assert not unkept
    rng = np.random.default_rng(99)
    fresh = (bootstrap(treated.values, rng), bootstrap(control.values, rng))
    assert first.treated is not None and first.control is not None
    assert np.array_equal(first.treated, fresh[0]) and np.array_equal(first.control, fresh[1])
    assert first.adjusted is not None and first.adjusted.shape == (2000, 3)
    assert group_draws(99, treated, control, keep=True)[0] is first  # kept, not recomputed
    changed = _group(control.values.copy())
    changed.values[0, 3] += 1.0
    again, _ = group_draws(99, treated, changed, keep=True)
    assert again.control is not None and not np.array_equal(again.control, first.control)
    assert again.treated is not None and first.treated is not None
    assert np.array_equal(again.treated, first.treated)  # treated draws come first
    few = _group(treated.values[:4])
    none = draws.Draws(None, None, None)
    assert group_draws(99, few, None, keep=True) == (none, False)  # under 5 jobs
    assert BootstrapDraws.objects.count() == 3

    def no_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("drew again instead of reading the stored draws")

    monkeypatch.setattr(draws, "_DRAWS", type(draws._DRAWS)())
    monkeypatch.setattr(draws, "compute_draws", no_bootstrap)
    stored, unkept = group_draws(99, treated, control)  # a read, in another process
    assert not unkept
    assert stored.treated is not None and stored.control is not None
    assert np.array_equal(stored.treated, first.treated)
    assert np.array_equal(stored.control, first.control)
    assert stored.adjusted is not None and np.array_equal(stored.adjusted, first.adjusted)
    assert group_draws(99, few, None) == (none, False)


@pytest.mark.django_db
def test_a_read_draws_in_memory_and_leaves_the_keeping_to_the_worker() -> None:
    """Without ``keep`` (any GET) missing draws are drawn in memory, stored nowhere, and
    reported unkept until the worker stored them; stored draws not marked used for a day
    are reported too, and only the worker marks them. The numbers are the same draws."""
    from ettweb.queries.impact import draws
    from ettweb.queries.impact.draws import group_draws
    from ettweb.rollouts.models import BootstrapDraws

    values = np.random.default_rng(3).uniform(1, 10, size=(14, 6))
    treated, control = _group(values[:8]), _group(values[8:])
    drawn, unkept = group_draws(7, treated, control)
    assert unkept and not BootstrapDraws.objects.exists()
    again, unkept = group_draws(7, treated, control)
    assert again is drawn and unkept  # from memory, still not stored
    kept, unkept = group_draws(7, treated, control, keep=True)
    assert not unkept and BootstrapDraws.objects.count() == 1
    assert kept.treated is not None and drawn.treated is not None
    assert np.array_equal(kept.treated, drawn.treated)
    assert group_draws(7, treated, control)[1] is False
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    BootstrapDraws.objects.update(used_at=two_days_ago)
    draws._DRAWS.clear()  # another process
    assert group_draws(7, treated, control)[1] is True
    assert BootstrapDraws.objects.get().used_at == two_days_ago  # a read marks nothing
    draws._DRAWS.clear()
    assert group_draws(7, treated, control, keep=True)[1] is False
    assert BootstrapDraws.objects.get().used_at > two_days_ago


def test_the_draws_digest_ignores_summation_order_but_not_a_change() -> None:
    """Sums a few bits apart (rows added in another order) select the same draws; a sum
    changed in its 9th significant digit, or zero against tiny, selects others."""
    from ettweb.queries.impact.draws import _digest

    rng = np.random.default_rng(4)
    values = rng.uniform(1e3, 1e9, size=(50, 6))
    values[3, 1] = 0.0
    flags = np.ones(50, dtype=bool)
    base = _digest(_group(values))
    nudged = values * (1 + 4e-16)  # a last-bit difference, as another plan's order gives
    assert not np.array_equal(nudged, values)
    assert _digest(_group(nudged)) == base
    changed = values.copy()
    changed[7, 2] *= 1 + 3e-8
    assert _digest(_group(changed)) != base
    tiny = values.copy()
    tiny[3, 1] = 1e-3
    assert _digest(_group(tiny)) != base
    fewer = flags.copy()
    fewer[0] = False
    assert _digest(_group(values, fewer, flags)) != base
    other_sizes = _group(values)
    other_sizes.gpus[0] = 1024
    assert _digest(other_sizes) != base
