"""Subscription rules and the settings page: what may be saved, the defaults a new user
sees, and that turning the report off stops the sends already planned."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from ettweb.access.roles import set_role
from ettweb.components.models import Component
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.subscriptions import check_address, check_names, check_time_zone

URL = "/reports/settings/"
GOOD = {"enabled": "on", "email": "alice@example.org", "time_zone": "Europe/Berlin",
        "fleet": "on", "owned": "on", "components": ["scheduler", "evaluation"]}


@pytest.mark.parametrize("address", ["bob", "bob@", "@example.com", "bob@intranet",
                                     "bob@@example.com", "bob smith@example.com"])
def test_check_address_refuses_by_name(address: str) -> None:
    """Django's validator: a dotted domain (only ``localhost`` may go without), named."""
    named = re.escape(repr(address))
    with pytest.raises(ValueError, match=f"^{named} is not a valid e-mail address$"):
        check_address(address)


def test_check_address_keeps_good_ones_trimmed() -> None:
    """A pasted address with spaces is still theirs; a local relay mailbox is allowed."""
    assert check_address("  alice@example.com ") == "alice@example.com"
    assert check_address("ops@localhost") == "ops@localhost"  # a local relay's mailbox


def test_check_time_zone_names_the_bad_zone() -> None:
    """The settings page shows this reason: it must name what was typed."""
    with pytest.raises(ValueError, match=r"unknown time zone 'Mars/Olympus' \(use an IANA"):
        check_time_zone("Mars/Olympus")
    with pytest.raises(ValueError, match="'europe/berlin'"):
        check_time_zone("europe/berlin")  # IANA names are case-sensitive
    for host_dependent in ("localtime", "Factory"):  # Debian's link to the server's zone
        with pytest.raises(ValueError, match=f"'{host_dependent}'"):
            check_time_zone(host_dependent)
    assert str(check_time_zone("Europe/Berlin")) == "Europe/Berlin"


def test_check_names_dedupes_in_order_and_names_strangers() -> None:
    """Order is the report's order; an unknown name is refused by name."""
    assert check_names("components", ["b", "a", "b"], ["a", "b"]) == ["b", "a"]
    with pytest.raises(ValueError, match=r"^components: unknown component 'c'$"):
        check_names("components", ["a", "c"], ["a", "b"])


@pytest.fixture
def alice(db: None, client: Client) -> User:
    """A logged-in owner of pt2_compiler (pt2_compiler's owner team is ``ads``, a label)."""
    # update_or_create: a transactional test before this one flushes the seeded rows.
    Component.objects.update_or_create(name="pt2_compiler", defaults={"owner_team": "ads"})
    Component.objects.update_or_create(name="scheduler", defaults={"owner_team": "infra"})
    user = User.objects.create_user("alice", email="alice@example.com")
    set_role(user, "owner", ["pt2_compiler"])
    client.force_login(user)
    return user


def page(client: Client, data: dict[str, object] | None = None) -> tuple[int, str]:
    """Status and unescaped body of a GET (``data`` None) or POST of the settings page."""
    response = client.get(URL) if data is None else client.post(URL, data)
    return response.status_code, html.unescape(response.content.decode())


def test_a_new_user_sees_the_defaults(alice: User, client: Client) -> None:
    """Saving without changes subscribes with the owner defaults shown here."""
    status, body = page(client)
    assert status == 200
    assert 'name="email" value="alice@example.com"' in body
    assert 'name="time_zone" value="UTC"' in body
    assert 'name="owned" aria-describedby="id_owned_helptext" id="id_owned" checked' in body
    assert '<span class="muted" id="id_owned_helptext">you own pt2_compiler</span>' in body
    chosen = re.search(r'<input type="checkbox" name="components" value="pt2_compiler"[^>]*>',
                       body)
    assert chosen is not None and "checked" not in chosen.group(0)  # owned, not chosen
    assert "teams" not in body.lower()  # no heading over nothing to choose
    assert 'name="enabled" id="id_enabled" checked' in body
    assert "You are not subscribed yet: save this form to start. You own components" in body
    assert '<option value="Europe/Berlin">' in body  # the zone list
    assert 'id="id_email_helptext"' in body  # what aria-describedby points at exists
    assert 'for=""' not in body  # checkbox groups get no label pointing nowhere
    assert not Subscription.objects.exists()  # looking changes nothing


def test_someone_who_owns_nothing_gets_no_owned_box(db: None, client: Client) -> None:
    """A group named like an owner team owns nothing: no box that would change nothing
    visible, no empty heading; saving keeps ``owned`` on, so components they are given later
    are listed without another visit."""
    Component.objects.update_or_create(name="pt2_compiler", defaults={"owner_team": "ads"})
    user = User.objects.create_user("bob", email="bob@example.com")
    user.groups.add(Group.objects.create(name="ads"))
    client.force_login(user)
    status, body = page(client)
    assert status == 200
    assert 'name="owned"' not in body and "You own components" not in body
    assert "teams" not in body.lower()
    assert 'name="components" value="pt2_compiler"' in body
    response = client.post(URL, {**GOOD, "owned": ""})  # a stale box posted: ignored
    assert response.status_code == 302
    saved = Subscription.objects.get(user=user)
    assert saved.owned and saved.components == ["scheduler", "evaluation"]


@pytest.mark.parametrize(("change", "reason"), [
    ({"email": "bob"}, "'bob' is not a valid e-mail address"),
    ({"email": "bob@intranet"}, "'bob@intranet' is not a valid e-mail address"),
    ({"email": ""}, "This field is required."),
    ({"time_zone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"components": ["nope"]}, "Select a valid choice. nope is not one of the available"),
])
def test_bad_input_is_shown_and_nothing_saved(alice: User, client: Client,
                                              change: dict[str, object], reason: str) -> None:
    """A bad field re-renders with its reason; half a subscription is never stored."""
    status, body = page(client, {**GOOD, **change})
    assert status == 200
    assert '<p class="error"' in body and reason in body
    assert not Subscription.objects.exists()


def test_a_good_post_saves_and_redirects(alice: User, client: Client) -> None:
    """Post/redirect/get, values trimmed, and the page confirms when the next one comes."""
    response = client.post(URL, {**GOOD, "email": "  alice@example.org ",
                                 "time_zone": " Europe/Berlin "})
    assert response.status_code == 302 and response["Location"] == f"{URL}?saved=1"
    saved = Subscription.objects.get(user=alice)
    assert (saved.email, saved.time_zone, saved.enabled, saved.fleet) == (
        "alice@example.org", "Europe/Berlin", True, True)
    assert saved.components == ["scheduler", "evaluation"] and saved.owned
    assert saved.unsubscribed_at is None
    body = html.unescape(client.get(f"{URL}?saved=1").content.decode())
    assert "Saved. Next report: Monday 09:00 Europe/Berlin to alice@example.org." in body
    assert "You are not subscribed yet" not in body
    response = client.post(URL, {**GOOD, "fleet": "", "owned": "", "components": []})
    saved.refresh_from_db()
    assert not saved.fleet and not saved.owned  # unchecked boxes save as off / empty
    assert saved.components == []
    assert Subscription.objects.count() == 1  # edited, not a second one


def test_turning_it_off_cancels_what_is_planned(alice: User, client: Client) -> None:
    """Off must also stop this week's planned sends, and keep when it was turned off."""
    subscription = Subscription.objects.create(user=alice, email=alice.email)
    due = datetime(2026, 3, 16, 9, tzinfo=UTC)
    for week, status in (("2026-W10", SendStatus.SENT), ("2026-W11", SendStatus.RETRY),
                         ("2026-W12", SendStatus.PENDING), ("2026-W09", SendStatus.FAILED)):
        SendRecord.objects.create(subscription=subscription, week=week, status=status,
                                  due_at=due, next_attempt_at=due)
    response = client.post(URL, {**GOOD, "enabled": ""})
    assert response.status_code == 302
    subscription.refresh_from_db()
    assert not subscription.enabled and subscription.unsubscribed_at is not None
    statuses = dict(SendRecord.objects.values_list("week", "status"))
    assert statuses == {"2026-W09": SendStatus.FAILED, "2026-W10": SendStatus.SENT,
                        "2026-W11": SendStatus.CANCELLED, "2026-W12": SendStatus.CANCELLED}
    body = html.unescape(client.get(f"{URL}?saved=1").content.decode())
    assert "Saved. You will not receive the report." in body
    assert "2026-W12</td><td>cancelled (unsubscribed)" in body  # the recent sends table
    off_since = subscription.unsubscribed_at
    client.post(URL, {**GOOD, "enabled": "", "time_zone": "Asia/Tokyo"})
    subscription.refresh_from_db()
    assert subscription.unsubscribed_at == off_since  # still off since the first time
    client.post(URL, GOOD)
    subscription.refresh_from_db()
    assert subscription.enabled and subscription.unsubscribed_at is None


def test_anonymous_is_sent_to_log_in(db: None, client: Client) -> None:
    """A subscription belongs to a user: no page, and no save, without one."""
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={URL}"
    response = client.post(URL, GOOD)
    assert response.status_code == 302 and not Subscription.objects.exists()
