"""The rollout's own component (ETT_SPEC §6.1), the adjusted estimate (§6.2), overlapping
rollouts (§6.4) and what an inconclusive verdict would take, on fleets worked out by hand.

Every job of a kind is identical, so each bootstrap draw of a group of one kind gives the
same change and an interval collapses onto its point: the numbers below are exact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ettweb.queries.impact import scopes_overlap
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import parse_scope
from tests.ettweb.rollouts.test_rollout_impact import day_job, impact, rollout, store

pytestmark = pytest.mark.django_db


def _kind(prefix: str, team: str, gpus: int, lost: tuple[str, float], train_h: float,
          days: tuple[int, ...]) -> list[dict[str, Any]]:
    """Five identical jobs on each of ``days`` (one a day would do; five make an interval)."""
    return [event for d in days for n in range(5)
            for event in day_job(f"{prefix}-{d}-{n}", d, gpus, team, lost, train_h)]


@pytest.fixture
def sized_fleet() -> None:
    """Rollout day 2026-03-10, W = 1: before = Mar 9, after = Mar 11.

    Treated (team ads): 1-GPU jobs checkpoint 2 h of 10 before, 0.5 h after; 8-GPU jobs
    4 h before, 1 h after. Control (feed): 1- and 8-GPU jobs that do not change, and 64-GPU
    jobs whose compile drops from 5 h to 1 h — a size the treated team does not run.
    """
    events: list[dict[str, Any]] = []
    events += _kind("a1b", "ads", 1, ("checkpoint_save", 2), 8, (9,))
    events += _kind("a1a", "ads", 1, ("checkpoint_save", 0.5), 9.5, (11,))
    events += _kind("a8b", "ads", 8, ("checkpoint_save", 4), 6, (9,))
    events += _kind("a8a", "ads", 8, ("checkpoint_save", 1), 9, (11,))
    events += _kind("f1", "feed", 1, ("compile", 1), 9, (9, 11))
    events += _kind("f8", "feed", 8, ("compile", 2), 8, (9, 11))
    events += _kind("f64b", "feed", 64, ("compile", 5), 5, (9,))
    events += _kind("f64a", "feed", 64, ("compile", 1), 9, (11,))
    store(events)


def test_component_effect_by_hand(sized_fleet: None) -> None:
    result = impact(rollout({"teams": ["ads"]}, component="checkpointing"), window=1)
    e = result.component_effect
    # Treated wall: 5 x 10 h x 1 GPU + 5 x 10 h x 8 GPUs = 450 GPU-h in each window.
    assert e.component == "checkpointing"
    assert e.treated.before_lost_pct == pytest.approx(100 * (5 * 2 + 5 * 4 * 8) / 450)
    assert e.treated.after_lost_pct == pytest.approx(100 * (5 * 0.5 + 5 * 1 * 8) / 450)
    assert e.treated.change_pts == pytest.approx(100 * (42.5 - 170) / 450)  # -28.33
    assert e.treated.change_rel == pytest.approx(42.5 / 170 - 1)
    assert e.control is not None
    assert (e.control.before_lost_pct, e.control.after_lost_pct) == (0.0, 0.0)
    assert e.did_pts == pytest.approx(100 * (42.5 - 170) / 450)
    assert e.did_ci95_pts is not None and e.did_ci95_pts[1] < 0
    assert e.verdict == "reduced"
    assert e.verdict_reason.startswith("the difference-in-differences interval")
    assert e.inconclusive is None
    body = result.as_api()["component_effect"]
    assert body["verdict"] == "reduced"
    assert body["treated"]["change_rel"] == pytest.approx(-0.75)
    assert set(body) >= {"component", "treated", "control", "did_pts", "did_ci95_pts",
                         "verdict"}
    assert set(body["treated"]) == {"before_lost_pct", "after_lost_pct", "change_pts",
                                    "change_rel", "ci95_pts"}


def test_component_effect_uses_the_same_draws_as_ett(sized_fleet: None) -> None:
    """§6.1: both intervals from one set of draws: with the checkpointing time turned into
    productive time one for one, each draw's ETT% change is minus its lost-share change."""
    result = impact(rollout({"teams": ["ads"]}, component="checkpointing"), window=1)
    t_ci, c_ci = result.treated.ci95_pts, result.component_effect.treated.ci95_pts
    assert t_ci is not None and c_ci is not None
    assert t_ci[0] == pytest.approx(-c_ci[1]) and t_ci[1] == pytest.approx(-c_ci[0])


def test_adjusted_estimate_by_hand(sized_fleet: None) -> None:
    """Unadjusted, the control's 64-GPU jobs (+40 pts) outweigh everything: the DiD says
    the treated fell behind. Stratified by size, those jobs have no treated counterpart and
    are left out, and each size's change is weighed by the treated jobs' GPU-hours."""
    result = impact(rollout({"teams": ["ads"]}, component="checkpointing"), window=1)
    control_before = 100 * (45 + 320 + 1600) / 3650
    control_after = 100 * (45 + 320 + 2880) / 3650
    treated_change = 100 * (42.5 - 170) / -450
    assert result.did_pts == pytest.approx(treated_change - (control_after - control_before))
    assert result.did_pts is not None and result.did_pts < 0  # unadjusted: below 0

    a = result.adjusted
    expected = (100 * 15 + 800 * 30) / 900  # 1-GPU +15 pts on 100 GPU-h, 8-GPU +30 on 800
    assert a.method == "size-stratified"
    assert a.treated.change_pts == pytest.approx(expected)
    assert a.control is not None and a.control.change_pts == pytest.approx(0.0)
    assert a.did_pts == pytest.approx(expected)
    assert a.did_ci95_pts == pytest.approx((expected, expected))
    assert a.verdict == "improved"
    assert (a.jobs_used, a.jobs_left_out, a.strata) == (40, 10, 2)
    body = result.as_api()["adjusted"]
    assert body["jobs_used"] == 40 and body["jobs_left_out"] == 10
    assert set(body) >= {"method", "treated", "control", "did_pts", "did_ci95_pts",
                         "verdict", "jobs_used", "jobs_left_out"}


def test_fleet_wide_adjusted_has_no_control(sized_fleet: None) -> None:
    result = impact(rollout({}, component="checkpointing"), window=1)
    a = result.adjusted
    assert a.control is None and a.did_pts is None and a.did_ci95_pts is None
    assert result.component_effect.control is None
    assert result.as_api()["adjusted"]["control"] is None
    # Strata 1, 8 and 64 GPUs: 1-GPU jobs +7.5 pts (from 85% to 92.5% over both teams'
    # 200 GPU-h), 8-GPU +15 (1,600 GPU-h), 64-GPU +40 (6,400 GPU-h).
    expected = (200 * 7.5 + 1600 * 15 + 6400 * 40) / 8200
    assert a.treated.change_pts == pytest.approx(expected)
    assert a.strata == 3 and a.jobs_left_out == 0


def test_no_jobs_gives_nulls_not_errors(sized_fleet: None) -> None:
    result = impact(rollout({"teams": ["nobody"]}, component="checkpointing"), window=1)
    body = result.as_api()
    assert body["component_effect"]["treated"]["change_pts"] is None
    assert body["component_effect"]["verdict"] == "inconclusive"
    assert body["adjusted"]["treated"]["change_pts"] is None
    assert body["adjusted"]["verdict"] == "inconclusive"
    assert body["adjusted"]["jobs_used"] == 50  # the control's jobs; no treated one


def test_inconclusive_says_what_it_would_take(sized_fleet: None) -> None:
    """A rollout to a component nobody changed: its share moves by 0 and the ETT% DiD
    interval is wide; the inconclusive verdicts carry the detectable effect and days."""
    result = impact(rollout({"teams": ["feed"]}, component="evaluation"), window=1)
    e = result.component_effect
    assert e.verdict == "inconclusive" and e.inconclusive is not None
    assert e.inconclusive.days_needed is None  # an estimate of 0: no window detects it
    assert result.verdict == "inconclusive" and result.inconclusive is not None
    takes = result.inconclusive
    assert takes.mde_pts > 0
    assert takes.days_needed is None or takes.days_needed >= 1
    assert result.as_api()["inconclusive"]["mde_pts"] == takes.mde_pts


# --------------------------------------------------------------------------- overlaps

def _at(day: int, hour: int = 12) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


def test_overlapping_rollouts_are_named() -> None:
    main = rollout({"teams": ["ads"]}, at=_at(10), component="checkpointing")
    same = Rollout.objects.create(name="ads and feed", component="checkpointing", at=_at(12),
                                  scope={"teams": ["ads", "feed"]})
    fleet = Rollout.objects.create(name="everyone", component="checkpointing", at=_at(4),
                                   scope={})
    Rollout.objects.create(name="other component", component="pt2_compiler", at=_at(11),
                           scope={})
    Rollout.objects.create(name="other team", component="checkpointing", at=_at(11),
                           scope={"teams": ["feed"]})
    Rollout.objects.create(name="too late", component="checkpointing", at=_at(26),
                           scope={})
    result = impact(main, window=7)
    assert [o.name for o in result.overlapping] == ["everyone", "ads and feed"]
    assert result.as_api()["overlapping"] == [
        {"id": fleet.pk, "name": "everyone", "at": "2026-03-04T12:00:00Z"},
        {"id": same.pk, "name": "ads and feed", "at": "2026-03-12T12:00:00Z"}]
    assert [o.name for o in impact(main, window=1).overlapping] == []


def test_scopes_overlap_by_labels_and_by_known_jobs(sized_fleet: None) -> None:
    def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return scopes_overlap(parse_scope(a), parse_scope(b))

    assert overlap({}, {"teams": ["ads"]})
    assert overlap({"teams": ["ads"]}, {"clusters": ["east"]})
    assert not overlap({"teams": ["ads"]}, {"teams": ["feed"]})
    assert overlap({"job_pattern": "a1*"}, {"teams": ["ads"]})  # a1b-9-0 is both
    assert not overlap({"job_pattern": "a1*"}, {"teams": ["feed"]})
