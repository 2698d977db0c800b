"""GPU-hours filters: a small fleet's hours never print as a bare ``0.00`` (issue 14)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ettweb.ingest.tasks import ingest_batch
from ettweb.pages.templatetags.ett_format import ago, count, ett, gpu_hours, hours
from ettweb.reports.templatetags.report_format import (
    breakable,
    gpuh,
    signed_gpu_hours,
    verdict_colour,
)


@pytest.mark.parametrize(("value", "shown"), [
    (None, "—"),
    (0.0, "0"),
    (0.5, "0.500"),
    (0.126, "0.126"),
    (0.0313, "0.0313"),
    (16 / 3600, "0.00444"),  # 16 GPU-seconds: floatformat:2 said 0.00
    (0.000417, "0.000417"),
    (0.00009, "<0.0001"),
    (-0.004, "-0.00400"),
    (1.0, "1.00"),
    (42.3456, "42.35"),
    (9_999.0, "9,999.00"),
    (12_345.6, "12,346"),
    (222_656_779.0, "222.66M"),
])
def test_hours_keeps_small_values_readable(value: float | None, shown: str) -> None:
    assert hours(value) == shown


@pytest.mark.parametrize("gpu_seconds", [0.5, 1.0, 16.0, 59.0, 452.0, 3599.0])
def test_no_non_zero_value_prints_as_zero(gpu_seconds: float) -> None:
    for text in (gpu_hours(gpu_seconds), gpuh(gpu_seconds)):
        assert re.fullmatch(r"<?[0.]+", text) is None, text
        assert text.startswith("<") or float(text.replace(",", "")) > 0


def test_gpu_hours_converts_seconds() -> None:
    assert gpu_hours(None) == "—"
    assert gpu_hours(7200.0) == "2.00"
    assert gpu_hours(452.0) == "0.126"


def test_report_hours_keep_their_column_precision() -> None:
    assert gpuh(52 * 3600.0) == "52.0" and gpuh(5549 * 3600.0) == "5,549"
    assert gpuh(0.0) == "0.0" and gpuh(16.0) == "0.00444"
    assert signed_gpu_hours(-16.0) == "-0.00444 GPU-h"
    assert signed_gpu_hours(0.0) == "+0.0 GPU-h"


def test_report_counts_and_hours_have_thousands_separators() -> None:
    """The e-mail's one number format: ``1,204`` failures, ``19,361`` GPU-hours, a dash for
    no data."""
    assert count(1204) == "1,204" and count(7) == "7" and count(None) == "—"
    assert gpuh(19_361 * 3600.0) == "19,361" and gpuh(None) == "—"
    assert signed_gpu_hours(-1_017 * 3600.0) == "-1,017 GPU-h"


def test_component_names_wrap_only_after_underscores() -> None:
    """A narrow table breaks ``distributed_runtime`` after its ``_``; the rest is escaped."""
    assert breakable("distributed_runtime") == "distributed_<wbr>runtime"
    assert breakable("a_<b>") == "a_<wbr>&lt;b&gt;"


def test_verdicts_are_coloured_by_whether_they_are_good() -> None:
    """ETT% up and a lost share down are good news; an interval that cannot tell is grey."""
    assert verdict_colour("improved") == verdict_colour("reduced") == "#047857"
    assert verdict_colour("regressed") == verdict_colour("increased") == "#b91c1c"
    assert verdict_colour("inconclusive") == "#6b7280"


@pytest.mark.django_db
def test_small_fleet_pages_show_non_zero_gpu_hours(
        client: Client, worked_example_lines: list[str]) -> None:
    """The worked example is 452 GPU-seconds: every GPU-hours cell is a small number."""
    ingest_batch(worked_example_lines)
    client.force_login(User.objects.create_user(username="owner", password="pw-owner-1"))
    fleet = client.get("/fleet/").content.decode()
    # 16 GPU-seconds of distributed_runtime: 0.00444 GPU-hours, not 0.00.
    assert re.search(r'distributed_runtime</a></td><td class="num">0\.00444</td>', fleet)
    jobs = client.get("/").content.decode()
    assert '<div class="value">0.126</div>' in jobs  # wall: 452 GPU-seconds
    assert re.search(r'id="jobs-table".*<td class="num">0\.0367</td>', jobs, re.S)  # j1 lost
    components = client.get("/components/").content.decode()
    row = components[components.index(">distributed_runtime</a>"):]
    assert re.match(r'[^/]*</a></td>\s*<td>—</td>\s*<td class="owners">—</td>\s*'
                    r'<td class="num">0\.00444</td>', row), row


def test_many_recoveries_read_as_a_mean_and_a_count() -> None:
    from ettweb.pages.templatetags.ett_format import duration, durations

    assert durations([]) == "—"
    assert durations([60.0, 120.0]) == f"{duration(60.0)}, {duration(120.0)}"
    assert durations([60.0] * 22 + [1440.0]) == f"{duration(120.0)} mean of 23"


def test_counts_have_thousands_separators_and_no_data_is_a_dash() -> None:
    assert (count(200_320), count(0), count(None)) == ("200,320", "0", "—")
    assert hours(9_881.95) == "9,881.95" and hours(154_257.0) == "154,257"


class _Numbers:
    def __init__(self, wall_gpu_s: float, ett_pct: float) -> None:
        self.wall_gpu_s, self.ett_pct = wall_gpu_s, ett_pct


def test_ett_of_nothing_is_a_dash_not_zero() -> None:
    """The queries answer 0% for no wall time; a page says there is nothing to show."""
    assert ett(_Numbers(0.0, 0.0)) == "—"
    assert ett(_Numbers(3600.0, 0.0)) == "0.00%" and ett(_Numbers(3600.0, 92.5)) == "92.50%"


@pytest.mark.django_db
def test_pages_with_no_jobs_in_range_show_a_dash(client: Client) -> None:
    client.force_login(User.objects.create_user("viewer"))
    jobs = client.get("/", {"date_from": "2001-01-01", "date_to": "2001-01-02"})
    assert re.search(r'id="fleet-ett">—<', jobs.content.decode())
    fleet = client.get("/fleet/", {"date_from": "2001-01-01", "date_to": "2001-01-02"})
    assert re.search(r'id="range-ett">—<', fleet.content.decode())


@pytest.mark.parametrize(("seconds", "words"), [
    (5, "just now"), (90, "2 min ago"), (59 * 60, "59 min ago"), (3 * 3600, "3 h ago"),
    (95 * 60, "95 min ago"), (86_400, "24 h ago"), (3 * 86_400, "3 days ago"),
    (12 * 86_400, "12 days ago"), (-180, "in 3 min")])
def test_ago_says_how_long_with_the_exact_time_on_hover(seconds: int, words: str) -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    html = ago(now - timedelta(seconds=seconds), now)
    moment = (now - timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert html == (f'<time datetime="{(now - timedelta(seconds=seconds)).isoformat()}" '
                    f'title="{moment}">{words}</time>')
    assert ago(None) == "—"
