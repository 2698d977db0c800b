"""Sending a week's reports exactly once.

Each :class:`SendRecord` moves ``pending``/``retry`` → ``sending`` by one conditional UPDATE
(the claim); only the process whose UPDATE changed the row sends. So two beats, a task retried
by the broker and the manual command can run at once and each report still goes out once.
After the claim: ``sent``, or ``retry`` with a growing wait (SMTP trouble, 4xx), or ``failed``
(5xx, or out of attempts). A sender that dies between claim and send leaves the row in
``sending``; :func:`mark_abandoned` turns it into ``missed`` after the claim timeout — never
back into ``pending``, because the message may have left before the crash, and a missed
report is better than a duplicate. The admin shows every state and can resend by hand.
"""

from __future__ import annotations

import logging
import os
import smtplib
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import get_connection
from django.db.models import F
from django.utils import timezone

from ettweb.queries import IsoWeek
from ettweb.reports.content import ReportCache, build_message, render_for
from ettweb.reports.models import CLAIMABLE, SendRecord, SendStatus
from ettweb.reports.planning import plan

log = logging.getLogger(__name__)
__all__ = ["CLAIMABLE", "SendSummary", "send_due", "send_records"]


def sender_name() -> str:
    """Who claimed a record (host:pid), shown in the admin next to a stuck claim."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class SendSummary:
    """What one run did, for the task's log line and the command's exit status."""

    sent: list[str] = field(default_factory=list)  # "2026-W47 → a@b"
    failed: list[str] = field(default_factory=list)  # "2026-W47 → a@b: attempt 5: SMTP 550"
    retrying: list[str] = field(default_factory=list)
    skipped: int = 0
    missed: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.retrying


def claim(record_id: int, now: datetime, *, ignore_due: bool = False) -> bool:
    """Take a record for sending; True only for the one caller whose UPDATE changed it."""
    rows = SendRecord.objects.filter(pk=record_id, status__in=CLAIMABLE)
    if not ignore_due:
        rows = rows.filter(next_attempt_at__lte=now)
    return rows.update(status=SendStatus.SENDING, claimed_at=now, claimed_by=sender_name(),
                       attempts=F("attempts") + 1) == 1


def mark_abandoned(now: datetime) -> int:
    """Claims older than the timeout: the sender died mid-send; mark them missed, not resend."""
    cutoff = now - timedelta(seconds=float(settings.ETT_REPORT_CLAIM_TIMEOUT_S))
    return SendRecord.objects.filter(status=SendStatus.SENDING, claimed_at__lt=cutoff).update(
        status=SendStatus.MISSED,
        last_error=("claimed but never finished: the sender stopped between claim and send; "
                    "not resent automatically so nobody gets it twice (resend from the admin)"))


def _permanent(exc: BaseException) -> bool:
    """A 5xx answer will not change on retry (bad address, refused sender)."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(code >= 500 for code, _ in exc.recipients.values())
    return isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500


def _describe(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        detail = exc.smtp_error.decode(errors="replace") if isinstance(
            exc.smtp_error, bytes) else str(exc.smtp_error)
        return f"SMTP {exc.smtp_code}: {detail}"
    return f"{type(exc).__name__}: {exc}"


def _failed(record: SendRecord, exc: BaseException, now: datetime) -> str:
    """Record a failed try: retry later with backoff, or give up (5xx, out of attempts)."""
    reason = _describe(exc)
    attempts = record.attempts
    if _permanent(exc) or attempts >= int(settings.ETT_REPORT_MAX_ATTEMPTS):
        status, wait = SendStatus.FAILED, 0.0
    else:
        status = SendStatus.RETRY
        wait = float(settings.ETT_REPORT_RETRY_BASE_S) * 2 ** (attempts - 1)
    SendRecord.objects.filter(pk=record.pk, status=SendStatus.SENDING).update(
        status=status, next_attempt_at=now + timedelta(seconds=wait),
        last_error=f"attempt {attempts}: {reason}"[:2000])
    log.warning("weekly report %s to %s: attempt %d failed (%s), %s", record.week,
                record.recipient, attempts, reason,
                "giving up" if status == SendStatus.FAILED else f"retrying in {wait:.0f} s")
    return status


def send_record(record: SendRecord, now: datetime, cache: ReportCache) -> str:
    """Render and send one claimed record; returns its new status."""
    subscription = record.subscription
    if not subscription.enabled:
        SendRecord.objects.filter(pk=record.pk).update(
            status=SendStatus.CANCELLED, last_error="unsubscribed before the report was sent")
        return SendStatus.CANCELLED
    try:
        rendered = render_for(subscription, IsoWeek.parse(record.week), cache)
        message = build_message(rendered, subscription.email, f"{record.week}.{record.pk}")
        with get_connection(fail_silently=False) as connection:
            connection.send_messages([message])
    except Exception as exc:
        return _failed(record, exc, now)
    SendRecord.objects.filter(pk=record.pk).update(
        status=SendStatus.SENT, sent_at=timezone.now(), recipient=subscription.email,
        subject=rendered.subject[:200], message_id=message.extra_headers["Message-ID"],
        last_error="")
    return SendStatus.SENT


def send_records(ids: Iterable[int], now: Callable[[], datetime], *, ignore_due: bool = False,
                 pause_s: float | None = None, budget_s: float | None = None,
                 cache: ReportCache | None = None) -> SendSummary:
    """Claim and send each record in turn, pausing between sends (a list must not burst the
    relay); a record another sender claimed first is skipped; stops when out of budget."""
    pause = float(settings.ETT_REPORT_PAUSE_S) if pause_s is None else pause_s
    cache = cache or ReportCache()
    summary, started, tried = SendSummary(), time.monotonic(), False
    for record_id in ids:
        if budget_s is not None and time.monotonic() - started > budget_s:
            break
        if tried and pause > 0:
            time.sleep(pause)
        tried = claim(record_id, now(), ignore_due=ignore_due)
        if not tried:
            summary.skipped += 1  # another sender has it (or had it): not ours to send
            continue
        record = SendRecord.objects.select_related("subscription").get(pk=record_id)
        status = send_record(record, now(), cache)
        label = f"{record.week} → {record.subscription.email}"
        if status == SendStatus.SENT:
            summary.sent.append(label)
        elif status == SendStatus.CANCELLED:
            summary.skipped += 1
        else:
            error = SendRecord.objects.values_list("last_error", flat=True).get(pk=record_id)
            (summary.retrying if status == SendStatus.RETRY else summary.failed).append(
                f"{label}: {error}")
    return summary


def due_records(now: datetime) -> list[int]:
    """Records whose time has come, oldest due first."""
    return list(SendRecord.objects.filter(status__in=CLAIMABLE, next_attempt_at__lte=now)
                .order_by("next_attempt_at", "id").values_list("pk", flat=True))


def send_due(now: Callable[[], datetime] = timezone.now, *, budget_s: float | None = None,
             pause_s: float | None = None) -> SendSummary:
    """What beat runs every minute: plan the last week, mark dead claims, send what is due."""
    plan(now())
    missed = mark_abandoned(now())
    summary = send_records(due_records(now()), now, budget_s=budget_s, pause_s=pause_s)
    summary.missed = missed
    return summary
