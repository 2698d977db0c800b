"""The calibration's series are production's: the daily lost shares ``bench.calibration``
builds from the engine's per-job-day sums (``ettweb.simulate.series``) equal the ones the
beat task reads from the rollups (``ettweb.changes.detection``) for the same simulated fleet,
so the detector is calibrated on exactly what it will search."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from ettweb.changes.detection import detection_range, lost_share_series
from ettweb.simulate.days import fleet_days
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import rollout_schedule
from ettweb.simulate.series import day_sums, lost_shares
from tests.ettweb.simulate.test_simulate_fleet import END, PLAN_ARGS

pytestmark = pytest.mark.django_db


def test_the_series_from_the_engine_equal_the_series_from_the_rollups() -> None:
    call_command("simulate_fleet", *PLAN_ARGS, "--no-progress", stdout=StringIO())
    plan = FleetPlan(seed=7, days=30, jobs=60, end=END)
    days = fleet_days(plan, rollout_schedule(plan))
    engine = lost_shares(day_sums(days, plan.days))
    stored = detection_range(today=END + timedelta(days=1))
    assert stored is not None
    web = {(s.component, s.team): s for s in lost_share_series(stored)}
    assert set(web) == set(engine)
    offset = (stored.date_from - days.first).days
    for key, series in web.items():
        expected = engine[key][offset:offset + len(series.shares)]
        np.testing.assert_allclose(series.shares, expected, rtol=1e-9, atol=1e-9,
                                   err_msg=str(key))
    assert len(web) > 10
