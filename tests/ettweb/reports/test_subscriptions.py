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
GOOD = {"enabled": "on", "email": "alice@example.com", "time_zone": "Europe/Berlin",
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
    response = client.post(URL, {**GOOD, "email": user.email, "owned": ""})  # a stale box
    assert response.status_code == 302
    saved = Subscription.objects.get(user=user)
    assert saved.owned and saved.components == ["scheduler", "evaluation"]


@pytest.mark.parametrize(("change", "reason"), [
    ({"email": "bob"}, "'bob' is not a valid e-mail address"),
    ({"email": "bob@intranet"}, "'bob@intranet' is not a valid e-mail address"),
    ({"email": ""}, "'' is not your account's address (alice@example.com): reports go only "
                    "there, or to an address an admin sets for you"),
    ({"email": "alice@example.org"}, "'alice@example.org' is not your account's address"),
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
    response = client.post(URL, {**GOOD, "email": "  alice@example.com ",
                                 "time_zone": " Europe/Berlin "})
    assert response.status_code == 302 and response["Location"] == f"{URL}?saved=1"
    saved = Subscription.objects.get(user=alice)
    assert (saved.email, saved.time_zone, saved.enabled, saved.fleet) == (
        "alice@example.com", "Europe/Berlin", True, True)
    assert not saved.email_from_admin
    assert saved.components == ["scheduler", "evaluation"] and saved.owned
    assert saved.unsubscribed_at is None
    body = html.unescape(client.get(f"{URL}?saved=1").content.decode())
    assert "Saved. Next report: Monday 09:00 Europe/Berlin to alice@example.com." in body
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


# --------------------------------------------------------------------------- the address

def test_a_viewer_cannot_send_the_report_to_another_address(db: None, client: Client) -> None:
    """Issue 40, 4a: a viewer directed the fleet report to any unverified address. The
    address is the account's (an admin's or the identity provider's); another is refused
    by name, nothing saved, and the field is shown read-only."""
    viewer = User.objects.create_user("vic", email="vic@example.com")
    client.force_login(viewer)
    status, body = page(client)
    assert re.search(r'<input type="email" name="email" value="vic@example.com"[^>]* readonly',
                     body)
    assert "your account's address; an admin can send the report elsewhere" in body
    status, body = page(client, {**GOOD, "email": "leak@elsewhere.example"})
    assert status == 200
    assert ("'leak@elsewhere.example' is not your account's address (vic@example.com): "
            "reports go only there, or to an address an admin sets for you") in body
    assert not Subscription.objects.exists()
    Subscription.objects.create(user=viewer, email=viewer.email)
    page(client, {**GOOD, "email": "leak@elsewhere.example"})
    assert Subscription.objects.get(user=viewer).email == "vic@example.com"


def test_an_account_without_an_address_is_told_who_sets_one(db: None, client: Client) -> None:
    client.force_login(User.objects.create_user("nomail"))
    status, body = page(client, {**GOOD, "email": ""})
    assert status == 200
    assert ("your account has no e-mail address, so the report has nowhere to go; an admin "
            "sets it (admin: Users, or manage.py ett_login NAME --email ADDRESS) or your "
            "identity provider does at sign-in") in body
    assert not Subscription.objects.exists()


def test_an_admin_may_set_any_address_and_it_stays_theirs(db: None, client: Client) -> None:
    """On their own page, and for someone else in the admin: the address is then the
    admin's choice, kept when the account's changes, and the user may keep it but not
    change it."""
    ada = User.objects.create_user("ada", email="ada@example.com")
    set_role(ada, "admin")
    client.force_login(ada)
    assert client.post(URL, {**GOOD, "email": "ops@example.net"}).status_code == 302
    mine = Subscription.objects.get(user=ada)
    assert (mine.email, mine.email_from_admin) == ("ops@example.net", True)

    bob = User.objects.create_user("bob", email="bob@example.com")
    theirs = Subscription.objects.create(user=bob, email=bob.email)
    change = client.post(f"/admin/reports/subscription/{theirs.pk}/change/", {
        "user": bob.pk, "email": "team-list@example.com", "enabled": "on",
        "time_zone": "UTC", "fleet": "on", "owned": "on", "components": "[]"})
    assert change.status_code == 302, change.content.decode()[:2000]
    theirs.refresh_from_db()
    assert (theirs.email, theirs.email_from_admin) == ("team-list@example.com", True)
    bob.email = "bob@new.example.com"
    bob.save()  # the account's address moves: the admin's choice stays
    theirs.refresh_from_db()
    assert theirs.email == "team-list@example.com"

    bobs = Client()
    bobs.force_login(bob)
    status, body = page(bobs)
    assert status == 200
    assert 'value="team-list@example.com"' in body and "set by an admin for you" in body
    assert bobs.post(URL, {**GOOD, "email": "team-list@example.com"}).status_code == 302
    status, body = page(bobs, {**GOOD, "email": "bob@new.example.com"})
    assert status == 302, body
    assert "is not your account's address" not in body  # their account's own: allowed
    theirs.refresh_from_db()
    assert (theirs.email, theirs.email_from_admin) == ("bob@new.example.com", False)
    _status, body = page(bobs, {**GOOD, "email": "other@example.com"})
    assert "'other@example.com' is not your account's address" in body


def test_the_subscription_follows_the_accounts_address(db: None) -> None:
    """The identity provider, ``ett_login --email`` and the admin change the account's
    address by saving the user: a subscription on the account's address moves with it."""
    user = User.objects.create_user("cy", email="cy@example.com")
    subscription = Subscription.objects.create(user=user, email=user.email)
    user.email = "cy@new.example.com"
    user.save(update_fields=["email"])
    subscription.refresh_from_db()
    assert subscription.email == "cy@new.example.com"
    user.email = ""
    user.save()  # no address now: nothing to follow, the last one stays
    subscription.refresh_from_db()
    assert subscription.email == "cy@new.example.com"
