"""When each weekly report is due, the week's send records, and the one beat schedule.

Weeks used (2026): W02 is Jan 5-11, so its report is due Monday Jan 12 (winter everywhere
north). Europe moves its clocks on Sunday Mar 29 and back on Sunday Oct 25: W13 (Mar 23-29)
ends on the change, so its Monday is the first in summer time; W43 (Oct 19-25) likewise ends
on the change back. The US changes on Sunday Mar 8, the last day of W10.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.utils import timezone
from pytest_django.fixtures import Settings

from ettweb.access.models import ComponentOwner
from ettweb.access.roles import set_role
from ettweb.components.models import Component
from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.queries import IsoWeek
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.planning import due_at, jitter_s, plan, plan_week
from ettweb.reports.subscriptions import ensure_owner_subscriptions, followed_components

W02 = IsoWeek(2026, 2)
LONG_AGO = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def no_jitter(settings: Settings) -> Settings:
    """Exact due times: no jitter, the default hour of settling."""
    settings.ETT_REPORT_JITTER_S = 0
    settings.ETT_REPORT_SETTLE_S = 3600
    return settings


@pytest.mark.parametrize(("week", "zone", "expected"), [
    (W02, "UTC", datetime(2026, 1, 12, 9, tzinfo=UTC)),
    (W02, "Europe/Berlin", datetime(2026, 1, 12, 8, tzinfo=UTC)),         # CET, +1
    (W02, "America/Los_Angeles", datetime(2026, 1, 12, 17, tzinfo=UTC)),  # PST, -8
    (W02, "Asia/Kolkata", datetime(2026, 1, 12, 3, 30, tzinfo=UTC)),      # +5:30
    (IsoWeek(2026, 12), "Europe/Berlin", datetime(2026, 3, 23, 8, tzinfo=UTC)),   # still CET
    (IsoWeek(2026, 13), "Europe/Berlin", datetime(2026, 3, 30, 7, tzinfo=UTC)),   # now CEST
    (IsoWeek(2026, 42), "Europe/Berlin", datetime(2026, 10, 19, 7, tzinfo=UTC)),  # CEST
    (IsoWeek(2026, 43), "Europe/Berlin", datetime(2026, 10, 26, 8, tzinfo=UTC)),  # CET again
    (IsoWeek(2026, 9), "America/Los_Angeles", datetime(2026, 3, 2, 17, tzinfo=UTC)),   # PST
    (IsoWeek(2026, 10), "America/Los_Angeles", datetime(2026, 3, 9, 16, tzinfo=UTC)),  # PDT
])
def test_due_monday_nine_local(no_jitter: Settings, week: IsoWeek, zone: str,
                               expected: datetime) -> None:
    """Spec §7: Monday 09:00 in the subscriber's zone, whatever the offset that day."""
    due = due_at(week, zone)
    assert due == expected
    assert due.utcoffset() == timedelta(0)  # always handed back in UTC


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "Australia/Sydney", "Pacific/Kiritimati"])
def test_east_of_utc_plus_nine_waits_for_the_week_to_end(no_jitter: Settings,
                                                         zone: str) -> None:
    """Monday 09:00 there is before (or at) Monday 00:00 UTC: clamped to the end + settle,
    so a report never covers a week still running in UTC."""
    for week in (W02, IsoWeek(2026, 28)):  # Sydney on summer (+11) and winter (+10) time
        assert due_at(week, zone) == week.ends_at + timedelta(hours=1)


def test_the_settle_time_moves_the_clamp(no_jitter: Settings) -> None:
    """A longer settle also delays zones whose Monday morning falls inside it."""
    no_jitter.ETT_REPORT_SETTLE_S = 4 * 3600
    assert due_at(W02, "Pacific/Kiritimati") == datetime(2026, 1, 12, 4, tzinfo=UTC)
    assert due_at(W02, "Asia/Kolkata") == datetime(2026, 1, 12, 4, tzinfo=UTC)  # 03:30 < 04:00
    assert due_at(W02, "Europe/Berlin") == datetime(2026, 1, 12, 8, tzinfo=UTC)  # untouched
    no_jitter.ETT_REPORT_SETTLE_S = 0
    assert due_at(W02, "Pacific/Kiritimati") == W02.ends_at


def test_an_unknown_zone_is_refused_by_name(no_jitter: Settings) -> None:
    """A typo in a stored zone must say which zone, not fail somewhere later."""
    with pytest.raises(ValueError, match="'Mars/Olympus'"):
        due_at(W02, "Mars/Olympus")


def test_jitter_is_stable_bounded_and_spread(settings: Settings) -> None:
    """Replanning must not move a send; a long list must not go out in one second."""
    settings.ETT_REPORT_JITTER_S = 600
    settings.ETT_REPORT_SETTLE_S = 3600
    offsets = [jitter_s(pk, W02) for pk in range(1, 201)]
    assert offsets == [jitter_s(pk, W02) for pk in range(1, 201)]
    assert all(0 <= offset < 600 for offset in offsets)
    assert len(set(offsets)) == 200  # every subscription its own moment
    assert max(offsets) - min(offsets) > 300  # spread over the window, not bunched
    assert jitter_s(1, W02) != jitter_s(1, W02.next)  # and a new one each week
    base = datetime(2026, 1, 12, 8, tzinfo=UTC)
    assert due_at(W02, "Europe/Berlin", 7) == base + timedelta(seconds=jitter_s(7, W02))
    assert due_at(W02, "Europe/Berlin", 7) > base


def test_no_jitter_when_the_setting_is_zero(settings: Settings) -> None:
    """ETT_REPORT_JITTER_S=0 is how an operator asks for exact Monday 09:00 sends."""
    settings.ETT_REPORT_JITTER_S = 0
    assert {jitter_s(pk, W02) for pk in range(1, 50)} == {0.0}


def subscribe(name: str, **fields: object) -> Subscription:
    """A subscription that existed long before any week planned here."""
    user = User.objects.create_user(name, email=f"{name}@example.com")
    subscription = Subscription.objects.create(user=user, email=user.email, **fields)
    Subscription.objects.filter(pk=subscription.pk).update(created_at=LONG_AGO)
    subscription.refresh_from_db()
    return subscription


@pytest.mark.django_db
def test_plan_week_is_idempotent_and_only_enabled(settings: Settings) -> None:
    """Two beats planning the same week must not send twice; an off switch means off."""
    settings.ETT_REPORT_JITTER_S = 600
    berlin = subscribe("berlin", time_zone="Europe/Berlin")
    sydney = subscribe("sydney", time_zone="Australia/Sydney")
    subscribe("off", enabled=False)
    assert plan_week(W02) == 2
    assert plan_week(W02) == 0  # a second beat, a retried task: nothing new
    records = {r.subscription_id: r for r in SendRecord.objects.filter(week="2026-W02")}
    assert set(records) == {berlin.pk, sydney.pk}
    for subscription in (berlin, sydney):
        record = records[subscription.pk]
        assert record.status == SendStatus.PENDING
        assert record.recipient == subscription.email
        assert record.due_at == record.next_attempt_at == due_at(
            W02, subscription.time_zone, subscription.pk)
    assert plan_week(W02.next) == 2  # the next week is its own record
    assert SendRecord.objects.count() == 4


@pytest.mark.django_db
def test_a_new_subscriber_waits_for_the_next_week(no_jitter: Settings) -> None:
    """Created after its Monday 09:00: last week's report would arrive mid-week."""
    early = subscribe("early")
    late = subscribe("late")
    due = due_at(W02, "UTC")
    Subscription.objects.filter(pk=late.pk).update(created_at=due + timedelta(seconds=1))
    Subscription.objects.filter(pk=early.pk).update(created_at=due - timedelta(seconds=1))
    assert plan_week(W02) == 1
    assert list(SendRecord.objects.values_list("subscription_id", flat=True)) == [early.pk]
    assert plan_week(W02.next) == 2  # the week after, both


@pytest.mark.django_db
def test_a_zone_gone_from_tzdata_falls_back_to_utc(no_jitter: Settings) -> None:
    """A stored zone that tzdata dropped must not stop the whole week's planning."""
    gone = subscribe("gone")
    Subscription.objects.filter(pk=gone.pk).update(time_zone="Mars/Olympus")
    assert plan_week(W02) == 1
    assert SendRecord.objects.get().due_at == datetime(2026, 1, 12, 9, tzinfo=UTC)


@pytest.mark.django_db
def test_plan_week_now_sends_every_enabled_one_now(no_jitter: Settings) -> None:
    """The manual send: due now, even for someone who subscribed a minute ago."""
    subscribe("old", time_zone="Australia/Sydney")
    User.objects.create_user("fresh", email="fresh@example.com")
    Subscription.objects.create(user=User.objects.get(username="fresh"),
                                email="fresh@example.com")
    subscribe("off", enabled=False)
    now = datetime(2026, 1, 5, 12, tzinfo=UTC)  # well before W02's Monday
    assert plan_week(W02, now=now) == 2
    assert set(SendRecord.objects.values_list("due_at", flat=True)) == {now}
    assert set(SendRecord.objects.values_list("recipient", flat=True)) == {
        "old@example.com", "fresh@example.com"}
    assert plan_week(W02, now=now + timedelta(hours=1)) == 0


@pytest.fixture
def ads_labels_two(db: None) -> Group:
    """Team ``ads`` is the owner team of pt2_compiler and checkpointing, and a Django group of
    that name exists: what default subscriptions used to follow (rows made here: a
    transactional test before this one flushes the seeded components)."""
    for name in ("pt2_compiler", "checkpointing"):
        Component.objects.update_or_create(name=name, defaults={"owner_team": "ads"})
    return Group.objects.create(name="ads")


def owner(name: str, *components: str, **fields: object) -> User:
    """A user with the owner role over ``components`` (``set_role``, as ett_login and SSO)."""
    user = User.objects.create_user(name, **{"email": f"{name}@example.com", **fields})
    set_role(user, "owner", components)
    return user


def test_plan_subscribes_owners_by_default(ads_labels_two: Group) -> None:
    """Spec §7: owners get the report without asking; defaults never override a no. Owners
    are the owner role's: a ComponentOwner row and an address suffice, no team group."""
    alice = owner("alice", "checkpointing")
    stopped = owner("stopped", "checkpointing")
    owner("nomail", "checkpointing", email="")
    owner("badmail", "checkpointing", email="badmail")
    owner("gone", "checkpointing", is_active=False)
    Subscription.objects.create(user=stopped, email=stopped.email, enabled=False,
                                unsubscribed_at=LONG_AGO)
    # A week whose Monday is still ahead, so today's new subscription is planned for it.
    now = timezone.now() + timedelta(days=14)
    assert plan(now) == 1
    subscribed = Subscription.objects.get(user=alice)
    assert (subscribed.email, subscribed.time_zone, subscribed.enabled, subscribed.fleet) == (
        "alice@example.com", "UTC", True, True)
    assert subscribed.owned and subscribed.components == []
    assert followed_components(subscribed) == ("checkpointing",)
    stopped_sub = Subscription.objects.get(user=stopped)
    assert not stopped_sub.enabled and stopped_sub.unsubscribed_at == LONG_AGO
    assert set(Subscription.objects.values_list("user__username", flat=True)) == {
        "alice", "stopped"}
    record = SendRecord.objects.get()
    assert record.subscription == subscribed and record.recipient == "alice@example.com"
    assert record.week == str(IsoWeek.last_complete(now))
    assert plan(now) == 0  # and a second run creates nothing


def test_only_the_owner_role_subscribes_by_default(ads_labels_two: Group) -> None:
    """A group named like an owner team owns nothing; neither do rows without the owner
    role (a viewer's, an admin's), nor the role without rows."""
    grouped = User.objects.create_user("grouped", email="grouped@example.com")
    grouped.groups.add(ads_labels_two)
    viewer = User.objects.create_user("viewer", email="viewer@example.com")
    ComponentOwner.objects.create(user=viewer, component="checkpointing")
    admin = User.objects.create_user("admin", email="admin@example.com")
    set_role(admin, "admin")
    ComponentOwner.objects.create(user=admin, component="checkpointing")
    owner("ownsnothing")
    assert ensure_owner_subscriptions() == 0
    assert plan(timezone.now() + timedelta(days=14)) == 0
    assert not Subscription.objects.exists() and not SendRecord.objects.exists()


def test_followed_components_chosen_first_then_owned(db: None) -> None:
    """The report's first rows are what the subscriber asked for, then what they own now:
    read for each report, so the owner role taken away takes its components off."""
    user = owner("f", "pt2_compiler", "checkpointing")
    subscription = Subscription(user=user, email=user.email,
                                components=["scheduler", "checkpointing"], owned=True)
    assert followed_components(subscription) == ("scheduler", "checkpointing",
                                                 "pt2_compiler")
    subscription.owned = False
    assert followed_components(subscription) == ("scheduler", "checkpointing")
    subscription.components = []
    subscription.owned = True
    assert followed_components(subscription) == ("checkpointing", "pt2_compiler")
    set_role(user, "viewer")
    subscription.user = User.objects.get(pk=user.pk)  # the next report loads the user anew
    assert followed_components(subscription) == ()


def test_the_beat_schedule_is_the_one_module_and_every_task_exists() -> None:
    """A misspelt task name in the schedule would fail silently every minute in beat."""
    from ettweb.celery import app

    assert django_settings.CELERY_BEAT_SCHEDULE is BEAT_SCHEDULE
    assert app.conf.beat_schedule == BEAT_SCHEDULE
    names = {entry["task"] for entry in BEAT_SCHEDULE.values()}
    assert "ett.send_due_reports" in names
    app.loader.import_default_modules()  # autodiscovery: every ettweb/<app>/tasks.py
    assert "ett.no_such_task" not in app.tasks
    missing = sorted(name for name in names if name not in app.tasks)
    assert missing == []
    expires = BEAT_SCHEDULE["send-due-reports"]["options"]["expires"]
    assert expires < BEAT_SCHEDULE["send-due-reports"]["schedule"]
