"""Sending the weekly report (ETT_SPEC §7) to a real SMTP server on loopback.

Every test drives ``send_due`` — what beat runs each minute — with a fake clock, so "Monday
09:00", "the retry is due" and "the claim timed out" are exact instants, never sleeps. What
arrives is parsed with the ``email`` package as a mail client would; the numbers in it are
checked against the dashboard API's JSON for the same days, not against the objects the
report was rendered from.

The fleet is test_weekly_query's (jobs inside single days of March 2026; W11 is Mon Mar 9 to
Sun Mar 15, W10 the week before) plus one job that fails once and recovers, so the report has
a failure to count.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from io import StringIO
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from pytest_django.fixtures import Settings

from ettweb.access.roles import set_role
from ettweb.access.tokens import issue_token
from ettweb.components.models import Component
from ettweb.pages.templatetags.ett_format import duration
from ettweb.queries import IsoWeek, WeeklyReportQuery, calculate
from ettweb.queries.markers import LIST_WINDOW_DAYS
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.planning import plan_week
from ettweb.reports.sending import claim, send_due, send_records
from ettweb.reports.templatetags.report_format import verdict_colour
from ettweb.reports.unsubscribe import read_token
from ettweb.rollouts.models import ImpactSummary, Rollout
from tests.conftest import mark, span
from tests.ettweb.reports.smtp_server import (
    NO_SUCH_USER,
    TRY_AGAIN,
    Received,
    SmtpServer,
    Stage,
)
from tests.ettweb.rollouts.test_rollout_impact import H, _day, day_job, store

pytestmark = pytest.mark.django_db

BASE = "https://ett.example.com"
W10, W11, W12 = IsoWeek(2026, 10), IsoWeek(2026, 11), IsoWeek(2026, 12)
#: W11's reports are due Monday Mar 16 at 09:00 UTC plus up to ETT_REPORT_JITTER_S (600 s).
AFTER_W11_DUE = datetime(2026, 3, 16, 9, 11, tzinfo=UTC)
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RETRY_BASE_S = 60.0
CLAIM_TIMEOUT_S = 900.0


class Clock:
    """A ``now`` callable for ``send_due`` that moves only when told."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> Clock:
        self.at += timedelta(seconds=seconds)
        return self


@pytest.fixture
def smtp(settings: Settings) -> Iterator[SmtpServer]:
    """A loopback relay, Django's SMTP backend pointed at it, no pause between sends."""
    with SmtpServer() as server:
        server.use_in(settings)
        settings.ETT_BASE_URL = BASE
        settings.ETT_REPORT_PAUSE_S = 0.0
        settings.ETT_REPORT_JITTER_S = 600.0
        settings.ETT_REPORT_SETTLE_S = 3600.0
        settings.ETT_REPORT_RETRY_BASE_S = RETRY_BASE_S
        settings.ETT_REPORT_MAX_ATTEMPTS = 5
        settings.ETT_REPORT_CLAIM_TIMEOUT_S = CLAIM_TIMEOUT_S
        yield server


def failing_job(job: str, d: int, gpus: int, team: str) -> list[dict[str, Any]]:
    """Compiles 1 h, trains 3 h, fails; restarts 30 min later, loads 30 min, trains 3 h."""
    t0 = _day(d)
    attrs = {"gpus": gpus, "team": team, "model": "dlrm", "cluster": "east"}
    return [mark(job, 0, "attempt_start", t0, attrs=attrs),
            span(job, 0, "compile", t0, t0 + 1 * H),
            span(job, 0, "train", t0 + 1 * H, t0 + 4 * H, step_start=0, step_end=50),
            mark(job, 0, "attempt_end", t0 + 4 * H, attrs={"status": "failed"}),
            mark(job, 1, "attempt_start", t0 + 4.5 * H, attrs=attrs),
            span(job, 1, "checkpoint_load", t0 + 4.5 * H, t0 + 5 * H),
            span(job, 1, "train", t0 + 5 * H, t0 + 8 * H, step_start=50, step_end=100),
            mark(job, 1, "attempt_end", t0 + 8 * H, attrs={"status": "completed"})]


@pytest.fixture
def fleet(db: None) -> None:
    events: list[dict[str, Any]] = []
    events += day_job("prev-a", 3, 2, "ads", ("compile", 2), 8)            # W10
    events += day_job("prev-b", 8, 1, "feed", ("checkpoint_save", 5), 5)   # W10
    events += day_job("this-a", 9, 2, "ads", ("compile", 1), 9)            # W11
    events += day_job("this-b", 11, 4, "feed", ("checkpoint_save", 1), 9)  # W11
    events += day_job("this-c", 15, 1, "ads", ("compile", 0), 10)          # W11
    events += failing_job("this-d", 12, 2, "ads")                          # W11, one failure
    events += day_job("next-a", 16, 8, "ads", ("compile", 5), 5)           # W12
    store(events)


def subscribe(name: str, **fields: Any) -> Subscription:
    """A user's subscription, made long before the weeks under test (created_at is
    auto_now_add, so it is moved back with an UPDATE)."""
    user = User.objects.create_user(name, email=f"{name}@example.com")
    subscription = Subscription.objects.create(user=user, email=user.email, **fields)
    Subscription.objects.filter(pk=subscription.pk).update(created_at=LONG_AGO)
    subscription.refresh_from_db()
    return subscription


class _Links(HTMLParser):
    """Every ``href`` and ``<img src>`` of an HTML part."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("href") is not None:
            self.hrefs.append(str(values["href"]))
        if tag == "img":
            self.images.append(str(values.get("src")))


def links(html: str) -> _Links:
    parser = _Links()
    parser.feed(html)
    return parser


class _Table(HTMLParser):
    """The rows of the table with class ``name``: each cell's text, whitespace collapsed."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.inside = name, False
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and dict(attrs).get("class") == self.name:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []
        elif self.inside and tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "table":
            self.inside = False

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def table(html: str, name: str) -> list[list[str]]:
    parser = _Table(name)
    parser.feed(html)
    assert parser.rows, f"no table {name!r}"
    return parser.rows


def bodies(received: Received) -> tuple[str, str]:
    """The text and HTML parts of a report, as a mail client decodes them."""
    message = received.message()
    plain, html = message.get_body(("plain",)), message.get_body(("html",))
    assert plain is not None and html is not None
    return str(plain.get_content()), str(html.get_content())


def only_to(smtp: SmtpServer, address: str) -> Received:
    messages = smtp.handler.to(address)
    assert len(messages) == 1, [m.rcpt_tos for m in smtp.received]
    return messages[0]


def admin_changelist(client: Client) -> str:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-root-1"))
    response = client.get("/admin/reports/sendrecord/")
    assert response.status_code == 200
    return response.content.decode()


# --- formatting as the templates do it (ETT_SPEC's reporting precision), kept separate
# --- from the template filters so a changed filter shows up here

def pct(value: float) -> str:
    return f"{value:.2f}%"


def pts(value: float) -> str:
    return f"{value:+.2f} pts"


def rel(value: float) -> str:
    return f"{100 * value:+.2f}%"


def _hours(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def gpuh(gpu_s: float) -> str:
    return _hours(gpu_s / 3600.0)


def signed_gpuh(gpu_s: float) -> str:
    return f"{'+' if gpu_s >= 0 else '-'}{_hours(abs(gpu_s) / 3600.0)} GPU-h"


def api(client: Client, token: str, path: str) -> dict[str, Any]:
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def week_query(week: IsoWeek) -> str:
    return f"date_from={week.range.date_from.isoformat()}&date_to={week.range.date_to.isoformat()}"


# --------------------------------------------------------------------------- the message

def test_a_scheduled_send_arrives_monday_morning_as_a_complete_message(
        fleet: None, smtp: SmtpServer) -> None:
    """End to end on the schedule: each subscriber's report arrives at their Monday 09:00
    (Tokyo's is held until an hour after the week ended in UTC), with the headers, the MIME
    tree and the inline chart a mail client needs, and every link on ETT_BASE_URL."""
    alice = subscribe("alice")
    kenji = subscribe("kenji", time_zone="Asia/Tokyo")
    late = subscribe("late")
    Subscription.objects.filter(pk=late.pk).update(  # signed up after alice's Monday morning
        created_at=datetime(2026, 3, 17, tzinfo=UTC))

    clock = Clock(datetime(2026, 3, 16, 0, 59, tzinfo=UTC))  # 09:59 in Tokyo, week not settled
    assert send_due(clock).sent == []
    assert smtp.received == []
    assert SendRecord.objects.filter(week="2026-W11").count() == 2  # planned; late waits

    clock.at = datetime(2026, 3, 16, 1, 11, tzinfo=UTC)  # week end + settle + jitter passed
    assert send_due(clock).sent == [f"2026-W11 → {kenji.email}"]
    clock.at = datetime(2026, 3, 16, 8, 59, tzinfo=UTC)
    assert send_due(clock).sent == []
    clock.at = AFTER_W11_DUE
    assert send_due(clock).sent == [f"2026-W11 → {alice.email}"]
    assert [r.rcpt_tos for r in smtp.received] == [(kenji.email,), (alice.email,)]
    assert not SendRecord.objects.filter(subscription=late).exists()

    received = only_to(smtp, alice.email)
    record = SendRecord.objects.get(subscription=alice, week="2026-W11")
    assert record.status == SendStatus.SENT and record.attempts == 1
    message = received.message()
    assert received.mail_from == "ett@localhost"
    assert re.fullmatch(r"ETT% 2026-W11: \d{1,3}\.\d% \([+-]\d+\.\d pts\)", message["Subject"])
    assert message["Subject"] == record.subject
    assert message["From"] == "ETT <ett@localhost>"
    assert message["To"] == alice.email
    assert message["Message-ID"] == record.message_id
    assert record.message_id == f"<ett-report.2026-W11.{record.pk}@localhost>"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["Date"]
    unsubscribe = re.fullmatch(rf"<({re.escape(BASE)}/reports/unsubscribe/([^/]+)/)>",
                               message["List-Unsubscribe"].strip())
    assert unsubscribe is not None, message["List-Unsubscribe"]
    assert read_token(unsubscribe.group(2)).subscription_id == alice.pk
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    assert message.get_content_type() == "multipart/related"
    alternative, image = message.iter_parts()
    assert alternative.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in alternative.iter_parts()] == ["text/plain",
                                                                        "text/html"]
    assert image.get_content_type() == "image/png"
    text, html = bodies(received)
    (src,) = links(html).images
    assert src.startswith("cid:")
    assert image["Content-ID"] == f"<{src.removeprefix('cid:')}>"
    assert image.get_content().startswith(PNG_SIGNATURE)

    hrefs = links(html).hrefs
    assert len(hrefs) >= 5 and unsubscribe.group(1) in hrefs
    assert all(h.startswith(f"{BASE}/") for h in hrefs), hrefs
    urls = re.findall(r"https?://\S+", text)
    assert len(urls) >= 5 and unsubscribe.group(1) in urls
    assert all(u.startswith(f"{BASE}/") for u in urls), urls


def test_every_number_is_the_dashboard_apis_for_the_same_week_and_scope(
        fleet: None, smtp: SmtpServer, client: Client) -> None:
    """ETT_SPEC §7: the report's numbers equal the API's and the dashboard's for those seven
    UTC days and that scope (a subscriber following pt2_compiler sees it listed first)."""
    carol = subscribe("carol", components=["pt2_compiler"])
    assert send_due(Clock(AFTER_W11_DUE)).sent == [f"2026-W11 → {carol.email}"]
    text, html = bodies(only_to(smtp, carol.email))

    reader = User.objects.create_user("reader", password="pw-reader-1")
    token = issue_token(reader, "report test")
    this = api(client, token, f"/api/v1/fleet/summary?{week_query(W11)}")
    before = api(client, token, f"/api/v1/fleet/summary?{week_query(W10)}")
    weekly = api(client, token, "/api/v1/reports/weekly?week=2026-W11&components=pt2_compiler")
    assert this["failures"] == 1 and before["failures"] == 0  # this-d's failed attempt
    assert len(this["top_jobs"]) >= 2
    assert weekly["this"] == {k: this[k] for k in weekly["this"]}  # the two endpoints agree
    assert weekly["before"] == {k: before[k] for k in weekly["before"]}
    assert weekly["top_jobs"] == this["top_jobs"]

    now, then = this["ett_pct"], before["ett_pct"]
    change = now - then
    assert only_to(smtp, carol.email).message()["Subject"] == weekly["subject"] == (
        f"ETT% 2026-W11: {now:.1f}% ({change:+.1f} pts)")
    lines = text.splitlines()
    assert (f"Fleet ETT%: {pct(now)}, {pts(change)} ({rel(now / then - 1)}) from {pct(then)} "
            f"the week before") in lines
    assert (f"Wall {gpuh(this['wall_gpu_s'])} GPU-h, productive "
            f"{gpuh(this['productive_gpu_s'])} GPU-h.") in lines

    lost_now, lost_then = this["lost_by_component_gpu_s"], before["lost_by_component_gpu_s"]
    names = set(lost_now) | set(lost_then) | {"pt2_compiler"}
    assert {c["component"] for c in weekly["components"]} == names
    assert lost_now["pt2_compiler"] > 0 and len(names) >= 2

    def row(name: str) -> str:
        lost, previous = lost_now.get(name, 0.0), lost_then.get(name, 0.0)
        return f"  {name:<22} {gpuh(lost):>10}  ({signed_gpuh(lost - previous)})"

    mine_at = lines.index("YOUR COMPONENTS: lost GPU-hours (change from the week before)")
    rest_at = lines.index("THE REST OF THE FLEET (change from the week before)")
    lifecycle_at = next(i for i, line in enumerate(lines) if line.startswith("LIFECYCLE"))
    assert [line for line in lines[mine_at + 1:rest_at] if line] == [row("pt2_compiler")]
    others = [c["component"] for c in weekly["components"] if c["component"] != "pt2_compiler"]
    assert [line for line in lines[rest_at + 1:lifecycle_at] if line] == [row(n) for n in others]
    for name in names:
        assert f">{gpuh(lost_now.get(name, 0.0))}</td>" in html

    assert (f"  Time to start (mean)    {duration(this['mean_time_to_start_s']):<12} "
            f"{duration(before['mean_time_to_start_s'])}") in lines
    assert (f"  Time to recover (mean)  {duration(this['mean_time_to_recover_s']):<12} "
            f"{duration(before['mean_time_to_recover_s'])}") in lines
    assert f"  Failures                {this['failures']:<12} {before['failures']}" in lines
    assert f'<td style="text-align:right;">{this["failures"]}</td>' in html

    jobs = this["top_jobs"]
    top_at = lines.index(f"TOP {len(jobs)} JOBS BY LOST GPU-HOURS")
    expected: list[str] = []
    for number, job in enumerate(jobs, start=1):
        url = f"{BASE}/jobs/{job['job']}/"
        expected += [f"  {number}. {job['job']}: {gpuh(job['lost_gpu_s'])} GPU-h lost of "
                     f"{gpuh(job['wall_gpu_s'])} wall GPU-h", f"     {url}"]
        assert f'<a href="{url}"' in html
    assert lines[top_at + 1:top_at + 1 + len(expected)] == expected
    top = table(html, "top-jobs")  # every number under a header that says what it is
    assert top[0] == ["", "job", "lost GPU-h", "of wall GPU-h"]
    assert [row[2:] for row in top[1:]] == [[gpuh(j["lost_gpu_s"]), gpuh(j["wall_gpu_s"])]
                                            for j in jobs]

    assert f">{pct(now)}" in html and f"from {pct(then)} the week before" in html
    dashboard = f"/fleet/?{week_query(W11)}"
    assert f"Dashboard for this week: {BASE}{dashboard}" in lines
    client.force_login(reader)
    page = client.get(dashboard)
    assert page.status_code == 200
    assert f'<div class="value" id="range-ett">{pct(now)}</div>' in page.content.decode()
    assert f'id="range-failures">{this["failures"]}</div>' in page.content.decode()


def test_every_link_starts_with_the_configured_base_url(
        fleet: None, smtp: SmtpServer, settings: Settings) -> None:
    """ETT_BASE_URL as the demo sets it: every link of both parts (the rollouts in the
    chart's key among them) and the unsubscribe header start with it, none with the
    default's localhost:8000."""
    base = "http://127.0.0.1:8123"
    settings.ETT_BASE_URL = base
    earlier = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                     at=datetime(2026, 3, 4, 12, tzinfo=UTC), scope={})
    this_week = Rollout.objects.create(name="async save", component="checkpointing",
                                       at=datetime(2026, 3, 10, 12, tzinfo=UTC), scope={})
    olga = subscribe("olga")
    assert send_due(Clock(AFTER_W11_DUE)).sent == [f"2026-W11 → {olga.email}"]
    received = only_to(smtp, olga.email)
    text, html = bodies(received)
    hrefs = links(html).hrefs
    for rollout in (earlier, this_week):
        assert f"{base}/rollouts/{rollout.pk}/" in hrefs
    assert len(hrefs) >= 8 and all(h.startswith(f"{base}/") for h in hrefs), hrefs
    urls = re.findall(r"https?://\S+", text)
    assert len(urls) >= 6 and all(u.startswith(f"{base}/") for u in urls), urls
    assert received.message()["List-Unsubscribe"].strip().startswith(f"<{base}/reports/")
    assert "localhost" not in html and "localhost" not in text


def test_the_chart_key_is_a_table_of_rollout_component_day_verdict(
        fleet: None, smtp: SmtpServer) -> None:
    """Each numbered line on the chart is a row: its name (linked), component, day and the
    verdict /rollouts/ shows for it (the warm pass's); this week's rollouts say what the
    report's "Rollouts this week" says, a rollout the warm pass has not reached says so."""
    earlier = Rollout.objects.create(name="compile cache", component="pt2_compiler",
                                     at=datetime(2026, 3, 4, 12, tzinfo=UTC), scope={})
    call_command("ett_warm_impacts", stdout=StringIO())
    summary = ImpactSummary.objects.get(rollout=earlier, window_days=LIST_WINDOW_DAYS)
    partial = " (partial)" if summary.partial else ""  # the fleet's days end on Mar 16
    Rollout.objects.create(name="late cache", component="pt2_compiler",
                           at=datetime(2026, 3, 5, 12, tzinfo=UTC), scope={})  # not warmed
    Rollout.objects.create(name="async save", component="checkpointing",
                           at=datetime(2026, 3, 13, 20, tzinfo=UTC), scope={})  # this week
    (week_rollout,) = calculate(WeeklyReportQuery(W11)).rollouts
    assert week_rollout.headline is not None
    now = (f"lost share {week_rollout.headline.component_verdict} ETT% "
           f"{week_rollout.headline.adjusted_verdict}")
    pia = subscribe("pia")
    assert send_due(Clock(AFTER_W11_DUE)).sent == [f"2026-W11 → {pia.email}"]
    text, html = bodies(only_to(smtp, pia.email))
    assert table(html, "chart-key") == [
        ["rollout", "component", "day", "verdict lost share, ETT%"],
        ["1 compile cache", "pt2_compiler", "4 Mar",
         f"lost share {summary.component_verdict} ETT% {summary.adjusted_verdict}{partial}"],
        ["2 late cache", "pt2_compiler", "5 Mar", "not computed yet"],
        ["3 async save", "checkpointing", "13 Mar",
         now + (" (partial)" if week_rollout.headline.partial else "")]]
    lines = text.splitlines()
    key_at = next(i for i, line in enumerate(lines) if line.startswith("ROLLOUTS IN THESE"))
    assert lines[key_at + 1:key_at + 4] == [
        f"  1. compile cache (pt2_compiler, 4 Mar): lost share {summary.component_verdict}, "
        f"ETT% {summary.adjusted_verdict}{partial}",
        "  2. late cache (pt2_compiler, 5 Mar): not computed yet",
        "  3. async save (checkpointing, 13 Mar): " + now.replace(" ETT%", ", ETT%")
        + (" (partial)" if week_rollout.headline.partial else "")]
    assert f"<b style=\"color:{verdict_colour(week_rollout.headline.adjusted_verdict)};\">" \
        f"{week_rollout.headline.adjusted_verdict}</b>" in html.split("Rollouts this week")[1]


def test_a_week_after_one_without_data_shows_dashes_not_zeros(
        fleet: None, smtp: SmtpServer) -> None:
    """W10's week before (W09) has no data: no change, and "—" wherever a number of that
    week would go (not "0 failures"), in both parts."""
    quinn = subscribe("quinn")
    assert "2026-W10: 1 sent, 0 failed" in _send_week(W10)
    text, html = bodies(only_to(smtp, quinn.email))
    lines = text.splitlines()
    (headline,) = [line for line in lines if line.startswith("Fleet ETT%: ")]
    now = re.fullmatch(r"Fleet ETT%: (\d+\.\d\d%) \(no data the week before\)", headline)
    assert now is not None, headline
    lifecycle_at = next(i for i, line in enumerate(lines) if line.startswith("LIFECYCLE"))
    assert [line.split()[-1] for line in lines[lifecycle_at + 1:lifecycle_at + 4]] == ["—"] * 3
    assert f"W09 — · W10 {now.group(1)}" in text
    assert [row[2] for row in table(html, "lifecycle")] == ["week before", "—", "—", "—"]
    assert "no data the week before" in html


@pytest.mark.parametrize(("week", "monday", "days", "data_before"), [
    (IsoWeek(2026, 13), datetime(2026, 3, 30, 9, 11, tzinfo=UTC), "23 Mar and 29 Mar", True),
    (IsoWeek(2026, 30), datetime(2026, 7, 27, 9, 11, tzinfo=UTC), "20 Jul and 26 Jul", False),
])
def test_a_week_without_data_sends_the_short_report(
        fleet: None, smtp: SmtpServer, client: Client, week: IsoWeek, monday: datetime,
        days: str, data_before: bool) -> None:
    """No training data: the report says so (and what the week before was, when it had data)
    instead of rendering dashes, and carries no chart nothing points to."""
    dan = subscribe("dan")
    assert send_due(Clock(monday)).sent == [f"{week} → {dan.email}"]
    received = only_to(smtp, dan.email)
    message = received.message()
    assert message["Subject"] == f"ETT% {week}: no training data this week"
    text, html = bodies(received)
    lines = text.splitlines()
    assert f"No training data this week: no job reported any time between {days} (UTC)." in lines
    token = issue_token(User.objects.create_user("reader"), "report test")
    before = api(client, token, f"/api/v1/fleet/summary?{week_query(week.previous)}")
    if data_before:  # W12 had next-a
        assert f"The week before, fleet ETT% was {pct(before['ett_pct'])}." in lines
    else:
        assert before["ett_pct"] is None and "The week before" not in text
    for broken in ("Fleet ETT%:", "LIFECYCLE", "TOP ", "—", "None%"):
        assert broken not in text
    assert f"{BASE}/fleet/?{week_query(week)}" in lines
    assert "No training data this week</h1>" in html and "<img" not in html
    assert message.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in message.walk()] == [
        "multipart/alternative", "text/plain", "text/html"]


# --------------------------------------------------------------------------- relay failures

def test_a_relay_saying_try_again_is_retried_after_the_backoff(
        smtp: SmtpServer, client: Client) -> None:
    """A 451 is temporary: the record waits ETT_REPORT_RETRY_BASE_S (visible in the admin),
    is not touched before then, and then goes out exactly once."""
    erin = subscribe("erin")
    smtp.fail_next(1, TRY_AGAIN)
    clock = Clock(AFTER_W11_DUE)
    first = send_due(clock)
    assert first.sent == [] and len(first.retrying) == 1 and not first.ok
    record = SendRecord.objects.get()
    assert record.status == SendStatus.RETRY and record.attempts == 1
    assert "451" in record.last_error and "try again later" in record.last_error
    assert record.next_attempt_at == clock.at + timedelta(seconds=RETRY_BASE_S)
    assert [r.rcpt_tos for r in smtp.handler.refused] == [(erin.email,)]
    assert smtp.received == []
    page = admin_changelist(client)
    assert "waiting to retry" in page and "attempt 1: SMTP 451: 4.3.0 try again later" in page

    assert send_due(clock.advance(RETRY_BASE_S - 1)).sent == []
    assert SendRecord.objects.get().status == SendStatus.RETRY
    assert smtp.received == [] and len(smtp.handler.refused) == 1  # the relay saw no new try

    assert send_due(clock.advance(2)).sent == [f"2026-W11 → {erin.email}"]
    record.refresh_from_db()
    assert record.status == SendStatus.SENT and record.attempts == 2 and record.last_error == ""
    assert send_due(clock.advance(86400)).sent == []
    assert len(smtp.handler.to(erin.email)) == 1


@pytest.mark.parametrize(("stage", "reply"), [
    ("rcpt", NO_SUCH_USER), ("data", "554 5.7.1 message refused as spam")])
def test_a_permanent_refusal_fails_at_once(smtp: SmtpServer, stage: Stage, reply: str) -> None:
    """A 5xx (to the recipient, or to the message) will not change on retry: failed after
    one try, never tried again."""
    frank = subscribe("frank")
    smtp.fail_next(1, reply, stage=stage)
    clock = Clock(AFTER_W11_DUE)
    summary = send_due(clock)
    code, text = reply.split(" ", 1)
    assert len(summary.failed) == 1 and code in summary.failed[0] and not summary.retrying
    record = SendRecord.objects.get()
    assert record.status == SendStatus.FAILED and record.attempts == 1
    assert code in record.last_error and text.split(" ", 1)[1] in record.last_error
    assert send_due(clock.advance(3 * 86400)).sent == []  # still W11's turn: never retried
    assert smtp.received == [] and len(smtp.handler.refused) == 1
    assert SendRecord.objects.get(subscription=frank).status == SendStatus.FAILED


def test_out_of_attempts_is_failed(smtp: SmtpServer, settings: Settings) -> None:
    """A relay that keeps saying 451: each wait doubles, and the last attempt gives up."""
    settings.ETT_REPORT_MAX_ATTEMPTS = 3
    subscribe("gina")
    smtp.fail_next(10, TRY_AGAIN)
    clock = Clock(AFTER_W11_DUE)
    send_due(clock)
    record = SendRecord.objects.get()
    assert (record.status, record.attempts) == (SendStatus.RETRY, 1)
    send_due(clock.advance(RETRY_BASE_S))
    record.refresh_from_db()
    assert (record.status, record.attempts) == (SendStatus.RETRY, 2)
    assert record.next_attempt_at == clock.at + timedelta(seconds=2 * RETRY_BASE_S)
    summary = send_due(clock.advance(2 * RETRY_BASE_S))
    record.refresh_from_db()
    assert (record.status, record.attempts) == (SendStatus.FAILED, 3)
    assert record.last_error.startswith("attempt 3: SMTP 451") and len(summary.failed) == 1
    send_due(clock.advance(86400))
    assert len(smtp.handler.refused) == 3 and smtp.received == []


def test_a_sender_dying_after_its_claim_leaves_a_missed_report_not_a_duplicate(
        smtp: SmtpServer, client: Client) -> None:
    """Claimed and never finished (the process died mid-send): after the claim timeout it is
    marked missed, shown in the admin, and no later run sends it — the message may have left."""
    hana = subscribe("hana")
    clock = Clock(AFTER_W11_DUE)
    assert plan_week(W11) == 1
    record = SendRecord.objects.get()
    assert claim(record.pk, clock())  # ... and the sender dies here

    assert send_due(clock.advance(CLAIM_TIMEOUT_S - 1)).missed == 0
    assert SendRecord.objects.get().status == SendStatus.SENDING
    summary = send_due(clock.advance(2))
    assert summary.missed == 1 and summary.sent == []
    record.refresh_from_db()
    assert record.status == SendStatus.MISSED and "never finished" in record.last_error
    for _ in range(3):
        send_due(clock.advance(3600))
    assert SendRecord.objects.get().status == SendStatus.MISSED
    assert smtp.handler.to(hana.email) == [] and smtp.received == []
    assert "missed (claimed, never finished)" in admin_changelist(client)


# --------------------------------------------------------------------------- exactly once

def test_each_report_is_sent_once_however_often_it_is_claimed(smtp: SmtpServer) -> None:
    """Two runs at the same minute, one id listed twice, a second claim: one message each."""
    ivan = subscribe("ivan")
    clock = Clock(AFTER_W11_DUE)
    assert send_due(clock).sent == [f"2026-W11 → {ivan.email}"]
    assert send_due(clock).sent == []
    sent = SendRecord.objects.get(week="2026-W11")
    assert not claim(sent.pk, clock(), ignore_due=True)

    plan_week(W12, now=clock())
    again = SendRecord.objects.get(week="2026-W12")
    summary = send_records([again.pk, again.pk], clock, pause_s=0)
    assert summary.sent == [f"2026-W12 → {ivan.email}"] and summary.skipped == 1

    plan_week(IsoWeek(2026, 13), now=clock())
    twice = SendRecord.objects.get(week="2026-W13")
    assert claim(twice.pk, clock()) is True
    assert claim(twice.pk, clock()) is False
    twice.refresh_from_db()
    assert twice.attempts == 1 and twice.status == SendStatus.SENDING
    subjects = [r.message()["Subject"].split(":")[0] for r in smtp.handler.to(ivan.email)]
    assert subjects == ["ETT% 2026-W11", "ETT% 2026-W12"]


def test_unsubscribing_cancels_the_pending_report(smtp: SmtpServer, client: Client) -> None:
    """The one-click link of a received report turns next week's pending send into
    "cancelled"; a subscription switched off between planning and sending is not sent."""
    jane, kai = subscribe("jane"), subscribe("kai")
    clock = Clock(AFTER_W11_DUE)
    assert len(send_due(clock).sent) == 2
    link = only_to(smtp, jane.email).message()["List-Unsubscribe"].strip().strip("<>")
    plan_week(W12)
    assert SendRecord.objects.filter(week="2026-W12", status=SendStatus.PENDING).count() == 2

    response = client.post(urlsplit(link).path, data="List-Unsubscribe=One-Click",
                           content_type="application/x-www-form-urlencoded")
    assert response.status_code == 200
    jane.refresh_from_db()
    assert not jane.enabled and jane.unsubscribed_at is not None
    assert SendRecord.objects.get(subscription=jane, week="2026-W12").status == \
        SendStatus.CANCELLED
    Subscription.objects.filter(pk=kai.pk).update(enabled=False)  # no cancel_unsent: a race

    summary = send_due(clock.advance(7 * 86400))  # W12's Monday morning
    assert summary.sent == [] and summary.skipped == 1
    record = SendRecord.objects.get(subscription=kai, week="2026-W12")
    assert record.status == SendStatus.CANCELLED and record.attempts == 1
    assert [len(smtp.handler.to(s.email)) for s in (jane, kai)] == [1, 1]


# --------------------------------------------------------------------------- owners

def _send_week(week: IsoWeek) -> str:
    """``manage.py send_weekly_reports --week W``: default subscriptions, plan, send now."""
    out = StringIO()
    call_command("send_weekly_reports", "--week", str(week), stdout=out)
    return out.getvalue()


def test_an_owner_gets_the_report_of_what_they_own_by_default(
        fleet: None, smtp: SmtpServer, client: Client) -> None:
    """The owner role is the one ownership: an owner of checkpointing with an address (in no
    group named like a team) is subscribed and sent the report with checkpointing first, as
    the API lists it for ``components=checkpointing``; a member of a group named like
    checkpointing's owner team, owning nothing, gets nothing. Taking the role away takes
    checkpointing off their next report."""
    Component.objects.update_or_create(name="checkpointing",
                                       defaults={"owner_team": "storage-team"})
    dana = User.objects.create_user("dana", email="dana@example.com")
    set_role(dana, "owner", ["checkpointing"])
    teamed = User.objects.create_user("teamed", email="teamed@example.com")
    teamed.groups.add(Group.objects.create(name="storage-team"))

    assert "2026-W11: 1 sent, 0 failed" in _send_week(W11)
    subscription = Subscription.objects.get()
    assert (subscription.user, subscription.email, subscription.owned) == (
        dana, "dana@example.com", True)
    assert [r.rcpt_tos for r in smtp.received] == [("dana@example.com",)]
    text, html = bodies(only_to(smtp, dana.email))
    token = issue_token(User.objects.create_user("reader"), "owner report test")
    weekly = api(client, token, "/api/v1/reports/weekly?week=2026-W11&components=checkpointing")
    assert [c["component"] for c in weekly["components"] if c["subscribed"]] == [
        "checkpointing"]
    lines = text.splitlines()
    mine_at = lines.index("YOUR COMPONENTS: lost GPU-hours (change from the week before)")
    rest_at = lines.index("THE REST OF THE FLEET (change from the week before)")
    (yours,) = [line for line in lines[mine_at + 1:rest_at] if line]
    checkpointing = next(c for c in weekly["components"] if c["component"] == "checkpointing")
    assert checkpointing["lost_gpu_s"] > 0  # this-b's checkpoint save
    assert yours.split()[:2] == ["checkpointing", gpuh(checkpointing["lost_gpu_s"])]
    assert "yours" in html

    set_role(dana, "viewer")
    assert "2026-W12: 1 sent, 0 failed" in _send_week(W12)
    text, _ = bodies(smtp.handler.to(dana.email)[1])
    assert "YOUR COMPONENTS" not in text and "LOST GPU-HOURS BY COMPONENT" in text
    assert smtp.handler.to(teamed.email) == []
