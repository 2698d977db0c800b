"""Beat's ``ett.detect_changes`` on real rollups: the step planted in ``fleet.py`` (team ads'
evaluation, Feb 21 2026) is read from ``FleetDayRollup`` and ``LabelDayRollup``, found for
the team and for the fleet, and stored; only complete days count; the phase map is the
editable one; a re-run keeps when a change was first seen and drops what is gone."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from ettweb.changes.detection import detection_range, lost_share_series
from ettweb.changes.models import Change
from ettweb.changes.tasks import detect_changes
from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.rollups.models import PhaseComponent
from tests.ettweb.changes.fleet import DAYS, FIRST, STEP_DAY, _train_h, ingest_fleet

pytestmark = pytest.mark.django_db
LAST = FIRST + timedelta(days=DAYS - 1)
STEP = (STEP_DAY - FIRST).days


@pytest.fixture(autouse=True)
def fleet() -> None:
    ingest_fleet()


def _ads_share(index: int) -> float:
    eval_h = 3.0 if index >= STEP else 1.0
    return 100.0 * eval_h / (eval_h + _train_h(index))


def _fleet_share(index: int) -> float:
    """ads (2 GPUs) and feed (1 GPU, its own training hours) together."""
    ads_eval = 3.0 if index >= STEP else 1.0
    lost = 2 * ads_eval + 1.0
    wall = 2 * (ads_eval + _train_h(index)) + (1.0 + _train_h(index + 2))
    return 100.0 * lost / wall


def _stored() -> list[tuple[str, str, str]]:
    """(component, team or "" for the fleet, day) of every stored change."""
    return sorted((c.component, c.team or "", c.day.isoformat()) for c in Change.objects.all())


def test_the_series_are_the_components_lost_share_per_group_and_day() -> None:
    days = detection_range()
    assert days is not None and (days.date_from, days.date_to) == (FIRST, LAST)
    series = {(s.component, s.team): s for s in lost_share_series(days)}
    assert set(series) == {("evaluation", None), ("evaluation", "ads"),
                           ("evaluation", "feed")}  # nothing else lost any time
    assert series[("evaluation", "ads")].shares == pytest.approx(
        [_ads_share(i) for i in range(DAYS)])
    assert series[("evaluation", None)].shares == pytest.approx(
        [_fleet_share(i) for i in range(DAYS)])
    assert series[("evaluation", None)].first == FIRST


def test_the_beat_task_stores_the_planted_step_for_the_team_and_the_fleet() -> None:
    assert detect_changes() == 2
    assert _stored() == [("evaluation", "", STEP_DAY.isoformat()),
                         ("evaluation", "ads", STEP_DAY.isoformat())]
    ads = Change.objects.get(team="ads")
    assert ads.before_lost_pct == pytest.approx(np.mean([_ads_share(i) for i in range(STEP)]))
    assert ads.after_lost_pct == pytest.approx(
        np.mean([_ads_share(i) for i in range(STEP, DAYS)]))
    assert ads.change_pts == pytest.approx(ads.after_lost_pct - ads.before_lost_pct)
    assert 13.0 < ads.change_pts < 16.0


def test_only_complete_days_are_read() -> None:
    """Today's rows are still filling: a run two days after the step has one complete day
    at the new level, too few to call it; eight days after, it is found."""
    two_after = detection_range(today=STEP_DAY + timedelta(days=2))
    assert two_after is not None and two_after.date_to == STEP_DAY + timedelta(days=1)
    from ettweb.changes.detection import detect_changes as run

    assert run(today=STEP_DAY + timedelta(days=2)).changes == 0
    assert run(today=STEP_DAY + timedelta(days=8)).changes == 2
    assert detection_range(today=FIRST) is None  # nothing complete yet
    assert run(today=FIRST).changes == 0 and Change.objects.count() == 2  # left alone


def test_a_rerun_keeps_when_a_change_was_first_seen_and_drops_what_is_gone() -> None:
    from ettweb.changes.detection import detect_changes as run

    run()
    first_seen = dict(Change.objects.values_list("team", "detected_at"))
    run()
    assert dict(Change.objects.values_list("team", "detected_at")) == first_seen
    run(today=STEP_DAY + timedelta(days=2))  # the same days as if the step had not come yet
    assert Change.objects.count() == 0


def test_the_phase_map_decides_the_component() -> None:
    PhaseComponent.objects.update_or_create(phase="eval", defaults={"component": "trainer_init"})
    detect_changes()
    assert {c[0] for c in _stored()} == {"trainer_init"}


def test_beat_runs_it_hourly_and_the_command_runs_it_now() -> None:
    entry = BEAT_SCHEDULE["detect-changes"]
    assert entry["task"] == "ett.detect_changes"
    assert entry["options"]["expires"] < entry["schedule"] == 3600.0
    assert detect_changes.name == "ett.detect_changes"
    out = StringIO()
    call_command("ett_detect_changes", stdout=out)
    assert out.getvalue().strip() == (
        f"detected 2 changes in 3 series ({FIRST} to {LAST}), "
        + out.getvalue().strip().rsplit(", ", 1)[1])
    assert Change.objects.count() == 2
