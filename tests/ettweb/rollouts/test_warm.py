"""Beat's warm pass: the rollout page's standard windows drawn ahead and stored, read back
instead of drawn again, pruned when nobody used them for a week."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.test import Client

from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner
from ettweb.queries.impact import draws as impact_draws
from ettweb.rollouts.models import BootstrapDraws, ImpactSummary
from ettweb.rollouts.warm import WARM_WINDOWS, warm_impacts
from tests.ettweb.queued import QueuedTask
from tests.ettweb.rollouts.test_rollout_impact import day_job, rollout, store

pytestmark = pytest.mark.django_db


def _fleet() -> None:
    """Six treated jobs a day either side of 2026-03-10, enough for an interval."""
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"b{n}", 8 + n % 2, 2, "ads", ("compile", 1 + n % 3), 8)
        events += day_job(f"a{n}", 11 + n % 2, 2, "ads", ("compile", 0.5), 9)
    store(events)


def test_warm_pass_stores_the_standard_windows_and_later_loads_draw_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fleet()
    first, second = rollout({}), rollout({"teams": ["ads"]}, component="checkpointing")
    stats = warm_impacts()
    assert stats.impacts == 2 * len(WARM_WINDOWS)
    # The data span 5 days, so every window from 7 days on sees the same jobs and sums:
    # each rollout's 5 windows share one set of draws.
    assert BootstrapDraws.objects.count() == 2
    expected = ImpactQueryRunner(ImpactQuery(first.pk, 14)).calculate()
    assert expected is not None and expected.treated.ci95_pts is not None

    def no_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warmed window drew again")

    monkeypatch.setattr(impact_draws, "_DRAWS", type(impact_draws._DRAWS)())
    monkeypatch.setattr(impact_draws, "compute_draws", no_bootstrap)
    for r in (first, second):
        for window in WARM_WINDOWS:
            again = ImpactQueryRunner(ImpactQuery(r.pk, window)).calculate()
            assert again is not None
    again = ImpactQueryRunner(ImpactQuery(first.pk, 14)).calculate()
    assert again is not None and again.treated.ci95_pts == expected.treated.ci95_pts


def test_a_page_draws_in_memory_and_the_worker_keeps_what_it_asked_for(
        admin_client: Client, queued: Callable[[], list[QueuedTask]]) -> None:
    """A window no pass warmed: the API and the page answer from draws made in memory, store
    nothing, and ask the worker once; its task stores the draws and the summary, and the
    numbers read back are the same."""
    _fleet()
    r = rollout({"teams": ["ads"]})
    path = f"/api/v1/rollouts/{r.pk}/impact?window=3"
    drawn = admin_client.get(path).json()
    assert drawn["treated"]["ci95_pts"] is not None
    assert admin_client.get(f"/rollouts/{r.pk}/?window=3").status_code == 200
    assert not BootstrapDraws.objects.exists() and not ImpactSummary.objects.exists()
    (task,) = queued()  # the API and the page asked once
    assert task == QueuedTask("ett.warm_rollout_impact", [r.pk, 3])
    assert task.run() is True
    assert BootstrapDraws.objects.count() == 1
    assert ImpactSummary.objects.filter(rollout=r, window_days=3).exists()
    impact_draws._DRAWS.clear()  # another process: reads the stored draws
    assert admin_client.get(path).json() == drawn
    assert queued() == []
    assert QueuedTask(task.name, [r.pk + 1, 3]).run() is False  # a rollout deleted since


def test_draws_unused_for_a_week_are_pruned_and_read_ones_kept() -> None:
    _fleet()
    r = rollout({})
    warm_impacts(windows=(2,))
    (row,) = BootstrapDraws.objects.all()
    stale = BootstrapDraws.objects.create(key="0" * 64, treated=np.zeros(3).tobytes(),
                                          control=None,
                                          used_at=datetime.now(UTC) - timedelta(days=8))
    BootstrapDraws.objects.filter(pk=row.pk).update(
        used_at=datetime.now(UTC) - timedelta(days=8))
    impact_draws._DRAWS.clear()
    stats = warm_impacts(windows=(2,))  # reads row again: marked used, so kept
    assert stats.pruned == 1
    assert list(BootstrapDraws.objects.values_list("pk", flat=True)) == [row.pk]
    assert not BootstrapDraws.objects.filter(pk=stale.pk).exists()
    assert ImpactQueryRunner(ImpactQuery(r.pk, 2)).calculate() is not None


def test_beat_runs_the_warm_pass_and_the_page_links_its_windows(admin_client: Client) -> None:
    entry = BEAT_SCHEDULE["warm-rollout-impacts"]
    assert entry["task"] == "ett.warm_rollout_impacts"
    assert entry["options"]["expires"] < entry["schedule"]
    _fleet()
    r = rollout({})
    page = admin_client.get(f"/rollouts/{r.pk}/?window=28").content.decode()
    links = page.split('id="standard-windows"')[1].split("</span>")[0]
    for days in WARM_WINDOWS:
        if days == 28:
            assert '<strong aria-current="true">28 d</strong>' in links
        else:
            assert f'href="?window={days}"' in links


def test_the_command_runs_the_warm_pass_now_so_the_list_has_verdicts(
        admin_client: Client) -> None:
    """``make demo`` runs it after loading its fleet: /rollouts/ then shows verdicts, not
    "not computed yet"."""
    _fleet()
    rollout({"teams": ["ads"]})
    assert "not-computed" in admin_client.get("/rollouts/").content.decode()
    out = StringIO()
    call_command("ett_warm_impacts", stdout=out)
    assert re.fullmatch(rf"computed {len(WARM_WINDOWS)} impacts in \d+\.\d s "
                        r"\(0 unused draws pruned\)", out.getvalue().strip())
    assert ImpactSummary.objects.count() == len(WARM_WINDOWS)
    page = admin_client.get("/rollouts/").content.decode()
    assert "not-computed" not in page and 'class="num component-cell"' in page
