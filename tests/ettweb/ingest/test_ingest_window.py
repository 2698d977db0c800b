"""The ingestion window (issue 40, part 1a): every time an event carries lies between
``ETT_INGEST_EARLIEST`` and now + ``ETT_INGEST_MAX_FUTURE_S``, or its line is quarantined
with the field, the value and the window; bad settings stop start-up naming the setting.

The test settings open the lower bound to the epoch (the suite's toy timestamps), so each
test here that needs the production default sets it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from pytest_django.fixtures import Settings

from ettweb.ingest.batches import ingest_lines, ingest_window
from ettweb.ingest.models import Event, Job, QuarantinedEvent
from ettweb.settings import env
from tests.conftest import LineFactory

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[3]
Y2000 = 946684800.0  # 2000-01-01T00:00:00Z
NOW = 1_796_000_000.0  # 2026-11-30


@pytest.fixture
def production_window(settings: Settings) -> None:
    settings.ETT_INGEST_EARLIEST = Y2000
    settings.ETT_INGEST_MAX_FUTURE_S = 86400.0


def _heartbeat(event_line: LineFactory, ts: float, job: str = "win") -> str:
    return event_line(job=job, kind="mark", mark="heartbeat", ts=ts)


@pytest.mark.usefixtures("production_window")
def test_issue_40_heartbeats_out_of_the_window_are_quarantined(event_line: LineFactory) -> None:
    """The first trigger: heartbeats at -1e18, 0, now, 2100 and 1e18 of a job with no other
    events. Only the one at now is stored; each other names its field, value and window."""
    times = (-1e18, 0.0, NOW, 4102444800.0, 1e18)
    result = ingest_lines([_heartbeat(event_line, ts) for ts in times], "node", now=NOW)
    assert (result.stored, result.rejected) == (1, 4)
    assert list(Event.objects.values_list("ts", flat=True)) == [NOW]
    assert Job.objects.get(job_id="win").last_event_time == NOW  # not stretched to 1e18
    reasons = sorted(QuarantinedEvent.objects.values_list("reason", flat=True))
    window = "[2000-01-01T00:00:00Z, 2026-12-01T00:53:20Z]"
    assert reasons == sorted(
        f"event.ts: {ts!r} is outside the ingestion window {window} (ETT_INGEST_EARLIEST to "
        "now + ETT_INGEST_MAX_FUTURE_S)" for ts in (-1e18, 0.0, 4102444800.0, 1e18))
    assert set(QuarantinedEvent.objects.values_list("job", flat=True)) == {"win"}


@pytest.mark.usefixtures("production_window")
@pytest.mark.parametrize(("fields", "named"), [
    ({"kind": "span", "phase": "compile", "start": Y2000 - 1, "end": Y2000 + 10}, "start"),
    ({"kind": "span", "phase": "compile", "start": NOW, "end": NOW + 86400 + 1}, "end"),
    ({"kind": "mark", "mark": "heartbeat", "ts": NOW + 86401}, "ts"),
    # The schema lets a mark carry a start or an end too; the table is partitioned on
    # coalesce(start, ts), so they are held to the window as well.
    ({"kind": "mark", "mark": "heartbeat", "ts": NOW, "start": 1e18}, "start"),
    ({"kind": "mark", "mark": "heartbeat", "ts": NOW, "end": -1.0}, "end"),
])
def test_every_time_field_is_held_to_the_window(event_line: LineFactory,
                                                fields: dict[str, object], named: str) -> None:
    good = _heartbeat(event_line, NOW - 5)
    result = ingest_lines([good, event_line(job="win", **fields)], now=NOW)
    assert (result.stored, result.rejected) == (1, 1)
    assert QuarantinedEvent.objects.get().reason.startswith(f"event.{named}: ")


@pytest.mark.usefixtures("production_window")
def test_the_bounds_are_inclusive(event_line: LineFactory) -> None:
    lines = [_heartbeat(event_line, Y2000), _heartbeat(event_line, NOW + 86400.0)]
    assert ingest_lines(lines, now=NOW).stored == 2


@pytest.mark.usefixtures("production_window")
def test_a_time_of_a_mark_that_is_no_number_is_quarantined(event_line: LineFactory) -> None:
    """Marks may carry ``start``; one that is no number would reach the float column."""
    line = event_line(kind="mark", mark="heartbeat", ts=NOW, start="soon")
    result = ingest_lines([line], now=NOW)
    assert result.rejected == 1
    assert QuarantinedEvent.objects.get().reason == \
        "event.start: 'soon' is not a time (epoch seconds)"


@pytest.mark.usefixtures("production_window")
def test_the_importer_keeps_the_lower_bound(event_line: LineFactory) -> None:
    """``ett_import`` brings history of any age (``any_age_partitions``): still not before
    ETT_INGEST_EARLIEST."""
    lines = [_heartbeat(event_line, 1000.0), _heartbeat(event_line, Y2000 + 86400 * 400)]
    result = ingest_lines(lines, "import", any_age_partitions=True, now=NOW)
    assert (result.stored, result.rejected) == (1, 1)
    assert "outside the ingestion window" in QuarantinedEvent.objects.get().reason


def test_the_window_follows_the_settings(settings: Settings) -> None:
    settings.ETT_INGEST_EARLIEST = Y2000 + 5
    settings.ETT_INGEST_MAX_FUTURE_S = 60.0
    assert ingest_window(NOW) == (Y2000 + 5, NOW + 60.0)


def test_the_default_window_is_2000_to_a_day_ahead() -> None:
    assert env.utc_date("ETT_UNSET_DATE", "2000-01-01") == Y2000
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ETT_INGEST_")}
    out = subprocess.run(
        [sys.executable, "-c", "from ettweb.settings import base; "
         "print(base.ETT_INGEST_EARLIEST, base.ETT_INGEST_MAX_FUTURE_S)"],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [str(Y2000), "86400.0"]


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("ETT_INGEST_EARLIEST", "last year", "ETT_INGEST_EARLIEST: not a date (YYYY-MM-DD, UTC): "
                                         "'last year'"),
    ("ETT_INGEST_EARLIEST", "1969-12-31", "ETT_INGEST_EARLIEST: must be between 1970-01-01 "
                                          "and today (UTC), got '1969-12-31'"),
    ("ETT_INGEST_EARLIEST", "2999-01-01", "ETT_INGEST_EARLIEST: must be between 1970-01-01 "
                                          "and today (UTC), got '2999-01-01'"),
    ("ETT_INGEST_MAX_FUTURE_S", "-1", "ETT_INGEST_MAX_FUTURE_S: must be >= 0, got -1"),
    ("ETT_INGEST_MAX_FUTURE_S", "1e18", "ETT_INGEST_MAX_FUTURE_S: must be <= 2592000 "
                                        "(30 days), got 1e+18"),
    ("ETT_INGEST_MAX_FUTURE_S", "inf", "ETT_INGEST_MAX_FUTURE_S: must be a finite number, "
                                       "got 'inf'"),
])
def test_a_bad_window_setting_stops_start_up_naming_it(variable: str, value: str,
                                                       message: str) -> None:
    environ = {**os.environ, variable: value}
    proc = subprocess.run([sys.executable, str(REPO / "manage.py"), "check"], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"configuration error: {message}"


def test_utc_date_reads_dates_and_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETT_X", "2020-02-01T12:00")
    assert env.utc_date("ETT_X", "2000-01-01") == 1580558400.0
    monkeypatch.setenv("ETT_X", "2020-02-01T12:00+02:00")
    assert env.utc_date("ETT_X", "2000-01-01") == 1580558400.0 - 7200
    monkeypatch.setenv("ETT_X", "soon")
    with pytest.raises(ImproperlyConfigured, match=r"^ETT_X: not a date"):
        env.utc_date("ETT_X", "2000-01-01")


def test_a_redelivered_batch_is_judged_at_its_new_now(event_line: LineFactory,
                                                     settings: Settings) -> None:
    """The window's upper bound moves with time: a heartbeat from a node whose clock ran two
    days ahead is refused now; nothing else about the batch is affected."""
    settings.ETT_INGEST_MAX_FUTURE_S = 86400.0
    ahead = time.time() + 2 * 86400
    result = ingest_lines([_heartbeat(event_line, ahead), _heartbeat(event_line, time.time())])
    assert (result.stored, result.rejected) == (1, 1)
    assert json.loads(QuarantinedEvent.objects.get().raw)["ts"] == ahead
