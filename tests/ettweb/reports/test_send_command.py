"""``manage.py send_weekly_reports``: sending a week by hand, previews, refusals, exit codes.

In-process cases use ``call_command`` (a CommandError's ``returncode`` is what ``manage.py``
exits with); where the real exit status, stderr or two processes at once matter, the command
runs as a subprocess against this test database and a loopback SMTP server — outside pytest
Django sends through SMTP, and the base settings read EMAIL_HOST/EMAIL_PORT from the
environment.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from pytest_django.fixtures import Settings

from ettweb.access.roles import set_role
from ettweb.queries import IsoWeek
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.sending import send_due
from ettweb.settings.env import database_url
from tests.ettweb.reports.smtp_server import SmtpServer, closed_port

ROOT = Path(__file__).resolve().parents[3]
WEEK = "2026-W11"
AFTER_W11_DUE = datetime(2026, 3, 16, 9, 11, tzinfo=UTC)
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)
SUMMARY = re.compile(rf"^{WEEK}: (\d+) sent, (\d+) failed, (\d+) to retry, (\d+) taken by "
                     r"another sender or unsubscribed meanwhile, (\d+) handled before$",
                     re.MULTILINE)


@pytest.fixture
def smtp(settings: Settings) -> Iterator[SmtpServer]:
    """A loopback relay, Django's SMTP backend pointed at it, no pause between sends."""
    with SmtpServer() as server:
        server.use_in(settings)
        settings.ETT_REPORT_PAUSE_S = 0.0
        yield server


def subscribe(name: str, **fields: Any) -> Subscription:
    user = User.objects.create_user(name, email=f"{name}@example.com")
    subscription = Subscription.objects.create(user=user, email=user.email, **fields)
    Subscription.objects.filter(pk=subscription.pk).update(created_at=LONG_AGO)
    return subscription


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def counts(run: Run) -> tuple[int, int, int, int, int]:
    """The "W: N sent, N failed, N to retry, N taken ..., N handled before" line of a run."""
    found = SUMMARY.search(run.out)
    assert found is not None, run
    sent, failed, retrying, skipped, before = (int(n) for n in found.groups())
    return sent, failed, retrying, skipped, before


def command(*args: str) -> Run:
    """The command in this process; exit status as ``manage.py`` would report it."""
    out, err = StringIO(), StringIO()
    try:
        call_command("send_weekly_reports", *args, "--no-progress", stdout=out, stderr=err)
    except CommandError as exc:
        return Run(exc.returncode, out.getvalue(), f"{err.getvalue()}CommandError: {exc}\n")
    return Run(0, out.getvalue(), err.getvalue())


def start(*args: str, smtp_env: dict[str, str], pause_s: float = 0.0) -> subprocess.Popen[str]:
    """``manage.py send_weekly_reports`` as its own process, on this test database."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test",
               DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(django_settings.CELERY_BROKER_URL),
               ETT_REPORT_PAUSE_S=str(pause_s), PYTHONUNBUFFERED="1", **smtp_env)
    return subprocess.Popen([sys.executable, "manage.py", "send_weekly_reports", *args,
                             "--no-progress"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[str]) -> Run:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"send_weekly_reports did not finish:\n{out}\n{err}")
    return Run(proc.returncode, out, err)


# --------------------------------------------------------------------------- in process

@pytest.mark.django_db
def test_the_command_sends_what_the_schedule_has_not(smtp: SmtpServer) -> None:
    """By hand and on the schedule share the send records: a report beat already sent is not
    sent again, the rest go out now, and a second run sends nothing."""
    early = subscribe("early")
    assert len(send_due(lambda: AFTER_W11_DUE, pause_s=0).sent) == 1
    second, third = subscribe("second"), subscribe("third")

    run = command("--week", WEEK)
    assert run.code == 0, run
    assert counts(run) == (2, 0, 0, 0, 1)  # early's, sent by the schedule, handled before
    assert smtp.handler.count_by_recipient() == {early.email: 1, second.email: 1,
                                                 third.email: 1}
    again = command("--week", WEEK)
    assert again.code == 0 and counts(again) == (0, 0, 0, 0, 3)
    assert len(smtp.received) == 3
    assert set(SendRecord.objects.values_list("status", flat=True)) == {SendStatus.SENT}


@pytest.mark.django_db
def test_dry_run_prints_each_recipient_and_sends_nothing(smtp: SmtpServer) -> None:
    """--dry-run: who would get what (and what they follow); no message, no record."""
    subscribe("ann")
    subscribe("bob", components=["pt2_compiler", "checkpointing"])
    subscribe("off", enabled=False)
    run = command("--week", WEEK, "--dry-run")
    assert run.code == 0, run
    subject = f"ETT% {WEEK}: no training data this week"
    assert run.out.splitlines() == [
        f"would send to ann@example.com (fleet only): {subject}",
        f"would send to bob@example.com (pt2_compiler, checkpointing): {subject}",
        f"2 report(s) would be sent for {WEEK}; nothing was sent",
    ]
    assert smtp.received == [] and not SendRecord.objects.exists()


def _would_send(run: Run) -> set[str]:
    return {line.split(" ", 3)[3].split(" ", 1)[0] for line in run.out.splitlines()
            if line.startswith("would send to ")}


@pytest.mark.django_db
def test_dry_run_counts_what_the_real_run_sends(smtp: SmtpServer) -> None:
    """Issue 40, 4b: the dry run said "0 report(s) would be sent" where the real run
    subscribed a new owner with an e-mail and sent 1. Both now ask ``recipients_now``; on the
    same data they name the same people: a new owner (subscribed by default), a subscriber,
    one the schedule already sent, one it planned but did not send yet, one turned off, an
    owner without a usable address, a viewer with an address (no default for viewers)."""
    scheduled = subscribe("early")
    assert len(send_due(lambda: AFTER_W11_DUE, pause_s=0).sent) == 1  # early: handled
    newcomer = User.objects.create_user("nora", email="nora@example.com")  # after the beat
    set_role(newcomer, "owner", ["pt2_compiler"])
    subscribe("ann")
    pending = subscribe("pat")
    SendRecord.objects.create(subscription=pending, week=WEEK, due_at=AFTER_W11_DUE,
                              next_attempt_at=datetime(2030, 1, 1, tzinfo=UTC))
    subscribe("off", enabled=False)
    set_role(User.objects.create_user("nomail", email="nomail@intranet"), "owner",
             ["checkpointing"])
    User.objects.create_user("vic", email="vic@example.com")  # a viewer: not by default

    dry = command("--week", WEEK, "--dry-run")
    assert dry.code == 0, dry
    assert f"skip {scheduled.email}: {WEEK} already handled" in dry.out.splitlines()
    assert (f"would send to nora@example.com (pt2_compiler, subscribed by default as an "
            f"owner): ETT% {WEEK}: no training data this week") in dry.out.splitlines()
    assert dry.out.splitlines()[-1] == f"3 report(s) would be sent for {WEEK}; nothing was sent"
    assert len(smtp.received) == 1  # early's, by the schedule; the dry run sent nothing
    assert not Subscription.objects.filter(user=newcomer).exists()

    run = command("--week", WEEK)
    assert run.code == 0, run
    assert counts(run)[0] == 3
    assert set(smtp.handler.count_by_recipient()) - {scheduled.email} == _would_send(dry) == {
        "nora@example.com", "ann@example.com", "pat@example.com"}
    again = command("--week", WEEK, "--dry-run")
    assert again.out.splitlines()[-1] == f"0 report(s) would be sent for {WEEK}; nothing was sent"


@pytest.mark.django_db
def test_to_sends_one_fleet_report_and_keeps_no_record(smtp: SmtpServer) -> None:
    """--to previews the fleet report at one address: subscribers get nothing, no record is
    made, and there is no unsubscribe link (the address subscribed to nothing)."""
    subscribe("sub")
    run = command("--week", WEEK, "--to", "boss@example.com")
    assert run.code == 0, run
    assert run.out == f"sent to boss@example.com: ETT% {WEEK}: no training data this week\n"
    (received,) = smtp.received
    assert received.rcpt_tos == ("boss@example.com",)
    message = received.message()
    assert message["To"] == "boss@example.com"
    assert message["Subject"] == f"ETT% {WEEK}: no training data this week"
    assert message["List-Unsubscribe"] is None and message["Auto-Submitted"] == "auto-generated"
    assert not SendRecord.objects.exists()


@pytest.mark.django_db
def test_a_refused_recipient_fails_the_command_with_the_reason(smtp: SmtpServer) -> None:
    """A 551 for one subscriber: the others are sent, the command exits 1 and says why, and
    the record keeps the error (permanent: no retry)."""
    moved, stays = subscribe("moved"), subscribe("stays")
    smtp.fail_next(1, "551 5.1.6 user has moved", stage="rcpt")
    run = command("--week", WEEK)
    assert run.code == 1
    assert f"not sent: {WEEK} → {moved.email}: attempt 1:" in run.err
    assert "551" in run.err and "user has moved" in run.err
    assert "1 report(s) for 2026-W11 not sent" in run.err
    assert counts(run)[:4] == (1, 1, 0, 0)
    assert SendRecord.objects.get(subscription=moved).status == SendStatus.FAILED
    assert SendRecord.objects.get(subscription=stays).status == SendStatus.SENT
    assert smtp.handler.count_by_recipient() == {stays.email: 1}


@pytest.mark.django_db
def test_no_relay_at_all_leaves_a_retry_and_exit_1(settings: Settings) -> None:
    """Connection refused is temporary: exit 1 with the reason, the record waits to retry."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", closed_port()
    settings.ETT_REPORT_PAUSE_S = 0.0
    subscribe("nobody")
    run = command("--week", WEEK)
    assert run.code == 1
    assert "ConnectionRefusedError" in run.err
    record = SendRecord.objects.get()
    assert record.status == SendStatus.RETRY and "ConnectionRefusedError" in record.last_error


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "reason"), [
    (("--week", "2026-W99"), "--week: 2026 has ISO weeks 1 to 53, not 99"),
    (("--week", "2026-47"), "--week: week must look like 2026-W47, not '2026-47'"),
    (("--week", WEEK, "--to", "not-an-address"), "--to: 'not-an-address' is not a valid"),
])
def test_bad_arguments_are_refused_in_process(smtp: SmtpServer, args: tuple[str, ...],
                                              reason: str) -> None:
    """Refused with status 2 before anything is planned or sent."""
    subscribe("waiting")
    run = command(*args)
    assert run.code == 2 and reason in run.err
    assert smtp.received == [] and not SendRecord.objects.exists()


# --------------------------------------------------------------------------- real processes

@pytest.mark.integration
@pytest.mark.django_db
def test_bad_arguments_exit_2_with_one_line(smtp: SmtpServer) -> None:
    """The real exit status and stderr: 2 and exactly one line naming the problem."""
    unfinished = IsoWeek.of(datetime.now(UTC).date()).next  # certainly not over yet
    cases = [(("--week", "2026-W99"), "2026 has ISO weeks 1 to 53, not 99"),
             (("--week", "2026-47"), "week must look like 2026-W47"),
             (("--week", str(unfinished)), f"{unfinished} has not ended yet"),
             (("--week", WEEK, "--to", "not-an-address"), "is not a valid e-mail address")]
    procs = [start(*args, smtp_env=smtp.env()) for args, _ in cases]
    for proc, (args, reason) in zip(procs, cases, strict=True):
        run = finish(proc)
        assert run.code == 2, (args, run)
        assert len(run.err.splitlines()) == 1, (args, run)  # the whole stderr, when more
        line = run.err.strip()
        assert line.startswith("CommandError: --") and reason in line, (args, line)
        assert run.out == ""
    assert smtp.received == []


@pytest.mark.integration
@pytest.mark.django_db
def test_a_preview_with_no_relay_exits_1_and_says_why(tmp_path: Path) -> None:
    """--to and a relay that refuses connections: exit status 1, the reason on stderr, and
    nothing else there, even the first time the charts are drawn on a machine (matplotlib
    building its font cache in a config directory it has never seen)."""
    proc = start("--week", WEEK, "--to", "boss@example.com",
                 smtp_env={"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(closed_port()),
                           "MPLCONFIGDIR": str(tmp_path / "matplotlib")})
    run = finish(proc)
    assert run.code == 1, run
    assert len(run.err.splitlines()) == 1, run  # the whole stderr, when it says more
    line = run.err.strip()
    assert line.startswith("CommandError: sending to boss@example.com failed: "
                           "ConnectionRefusedError"), line
    assert run.out == ""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_two_senders_at_once_send_each_report_exactly_once(smtp: SmtpServer) -> None:
    """Two commands started at the same moment on one database (a pause between sends so
    they overlap): every subscriber receives one message, every record is sent by exactly
    one of them, and their "N sent" lines add up."""
    subscriptions = [subscribe(f"user{n:02d}") for n in range(20)]
    procs = [start("--week", WEEK, smtp_env=smtp.env(), pause_s=0.1) for _ in range(2)]
    runs = [finish(proc) for proc in procs]
    for run in runs:
        assert run.code == 0, run
    assert [counts(run)[1:3] for run in runs] == [(0, 0), (0, 0)]
    sent = [counts(run)[0] for run in runs]
    assert sum(sent) == 20, sent

    assert smtp.handler.count_by_recipient() == {s.email: 1 for s in subscriptions}
    records = SendRecord.objects.filter(week=WEEK)
    assert records.count() == 20
    assert set(records.values_list("status", flat=True)) == {SendStatus.SENT}
    assert set(records.values_list("attempts", flat=True)) == {1}
    host = socket.gethostname()
    for proc, count in zip(procs, sent, strict=True):  # each counted what it claimed
        assert records.filter(claimed_by=f"{host}:{proc.pid}").count() == count
    message_ids = [r.message()["Message-ID"] for r in smtp.received]
    assert len(set(message_ids)) == 20
    assert set(message_ids) == set(records.values_list("message_id", flat=True))
