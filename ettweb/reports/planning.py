"""When each subscriber's report is due, and the week's send records.

ETT_SPEC §7: a week's report goes out on the Monday after it, at 09:00 in the subscriber's
time zone. East of UTC+9 that Monday morning comes before the week has ended in UTC, and a
report over an unfinished week would disagree with the dashboard an hour later; so the due
time is never earlier than the week's end plus ``ETT_REPORT_SETTLE_S`` (late events and
rollup refreshes land first). Each subscriber's time then moves by a jitter that is a hash of
(subscription, week) — stable across replans, spread across a long list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, time, timedelta
from typing import Final

from django.conf import settings

from ettweb.queries import IsoWeek
from ettweb.reports.models import CLAIMABLE, SendRecord, SendStatus, Subscription
from ettweb.reports.subscriptions import (
    check_time_zone,
    default_owner_subscriptions,
    ensure_owner_subscriptions,
)

#: Local hour of the Monday send (ETT_SPEC §7).
REPORT_HOUR: Final = 9


def jitter_s(subscription_id: int, week: IsoWeek) -> float:
    """A stable offset in ``[0, ETT_REPORT_JITTER_S)`` for one subscriber's week."""
    spread = float(settings.ETT_REPORT_JITTER_S)
    if spread <= 0:
        return 0.0
    digest = hashlib.sha256(f"{subscription_id}:{week}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * spread


def due_at(week: IsoWeek, time_zone: str, subscription_id: int = 0) -> datetime:
    """When ``week``'s report goes to a subscriber in ``time_zone`` (an aware UTC datetime)."""
    zone = check_time_zone(time_zone)
    local = datetime.combine(week.next.monday, time(REPORT_HOUR), tzinfo=zone)
    earliest = week.ends_at + timedelta(seconds=float(settings.ETT_REPORT_SETTLE_S))
    start = max(local, earliest)
    return (start + timedelta(seconds=jitter_s(subscription_id, week))).astimezone(
        earliest.tzinfo)


def plan_week(week: IsoWeek, now: datetime | None = None,
              subscriptions: Iterable[Subscription] | None = None) -> int:
    """Create the missing send records of ``week``; returns how many were created.

    Scheduled (``now`` None): each record is due at its subscriber's Monday morning, and a
    subscription made after that moment waits for next week (a Wednesday sign-up does not
    get last week's report mid-week). Sent by hand (``now`` given): every enabled
    subscription gets a record due now. Idempotent either way: the unique (subscription,
    week) constraint drops a record planned twice, so two beats planning at once create
    each record once, and a week already sent is never planned again. ``subscriptions``:
    only these (saved, enabled ones: :func:`recipients_now`'s), else every enabled one.
    """
    records = []
    if subscriptions is None:
        subscriptions = Subscription.objects.filter(enabled=True)
    for subscription in subscriptions:
        if now is not None:
            when = now
        else:
            try:
                when = due_at(week, subscription.time_zone, subscription.pk)
            except ValueError:
                when = due_at(week, "UTC", subscription.pk)  # a zone gone from tzdata
            if subscription.created_at > when:
                continue
        records.append(SendRecord(subscription=subscription, week=str(week), due_at=when,
                                  next_attempt_at=when, status=SendStatus.PENDING,
                                  recipient=subscription.email))
    before = SendRecord.objects.filter(week=str(week)).count()
    SendRecord.objects.bulk_create(records, ignore_conflicts=True)
    return SendRecord.objects.filter(week=str(week)).count() - before


def plan(now: datetime) -> int:
    """Subscribe owners by default, then plan the week that ended most recently."""
    ensure_owner_subscriptions()
    return plan_week(IsoWeek.last_complete(now))


def recipients_now(week: IsoWeek) -> list[Subscription]:
    """Who ``send_weekly_reports --week WEEK`` sends to if run now, by address.

    Every enabled subscription whose week is not handled yet (no record, or one still
    pending or waiting to retry), and, unsaved, the owners the run subscribes by default
    (:func:`default_owner_subscriptions`). One function for the run and its ``--dry-run``:
    the dry run, counting enabled subscriptions only, said "0 report(s) would be sent" where
    the real run subscribed a new owner and sent 1 (issue 40, item 4b).
    """
    handled = set(SendRecord.objects.filter(week=str(week)).exclude(status__in=CLAIMABLE)
                  .values_list("subscription_id", flat=True))
    found = [subscription for subscription
             in Subscription.objects.filter(enabled=True).select_related("user")
             if subscription.pk not in handled]
    found += default_owner_subscriptions()
    return sorted(found, key=lambda subscription: (subscription.email, subscription.user_id))
