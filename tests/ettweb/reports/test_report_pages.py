"""The unsubscribe link (no login: the signed token is the proof) and the preview page.

The preview's fleet is test_weekly_query's: W11 (Mar 9-15, 2026) has 70 wall GPU-hours of
which 64 productive (91.4%), W10 has 30 of which 21 (70.0%); so W11's subject reads
``ETT% 2026-W11: 91.4% (+21.4 pts)``.
"""

from __future__ import annotations

import html
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import signing
from django.test import Client
from pytest_django.fixtures import Settings

from ettweb.queries import IsoWeek
from ettweb.reports.content import ReportCache, render_for
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.unsubscribe import SALT, TokenError, make_token, read_token
from ettweb.rollouts.models import Rollout
from tests.ettweb.rollouts.test_rollout_impact import day_job, store

pytestmark = pytest.mark.django_db

W11_SUBJECT = "ETT% 2026-W11: 91.4% (+21.4 pts)"


@pytest.fixture
def subscription() -> Subscription:
    """On, with one report sent and two still to go."""
    user = User.objects.create_user("sam", email="sam@example.com")
    subscription = Subscription.objects.create(user=user, email=user.email)
    due = datetime(2026, 3, 16, 9, tzinfo=UTC)
    for week, status in (("2026-W10", SendStatus.SENT), ("2026-W11", SendStatus.PENDING),
                         ("2026-W12", SendStatus.RETRY)):
        SendRecord.objects.create(subscription=subscription, week=week, status=status,
                                  due_at=due, next_attempt_at=due)
    return subscription


def statuses() -> dict[str, str]:
    """Each planned week's status, to see what an unsubscribe cancelled."""
    return dict(SendRecord.objects.values_list("week", "status"))


def body(response: Any) -> str:
    """The page as text (entities decoded), so assertions read like the page."""
    return html.unescape(response.content.decode())


def old_token(subscription_id: int, age_s: float, monkeypatch: pytest.MonkeyPatch) -> str:
    """A token signed ``age_s`` ago: the signer's clock moved back for that one call."""
    signed_at = int(time.time() - age_s)
    with monkeypatch.context() as patch:
        patch.setattr(signing.TimestampSigner, "timestamp",
                      lambda self: signing.b62_encode(signed_at))
        return make_token(subscription_id)


def test_get_only_asks(subscription: Subscription, client: Client) -> None:
    """Mail scanners open every link: a GET must not unsubscribe."""
    url = f"/reports/unsubscribe/{make_token(subscription.pk)}/"
    response = client.get(url)
    assert response.status_code == 200
    page = body(response)
    assert "Stop sending the weekly ETT% report to <b>sam@example.com</b>" in page
    assert '<form method="post"><button type="submit">Unsubscribe</button></form>' in page
    subscription.refresh_from_db()
    assert subscription.enabled and subscription.unsubscribed_at is None
    assert statuses() == {"2026-W10": "sent", "2026-W11": "pending", "2026-W12": "retry"}


def test_one_click_post_unsubscribes(subscription: Subscription) -> None:
    """RFC 8058: the mail client POSTs ``List-Unsubscribe=One-Click``, with no CSRF token."""
    client = Client(enforce_csrf_checks=True)
    url = f"/reports/unsubscribe/{make_token(subscription.pk)}/"
    response = client.post(url, {"List-Unsubscribe": "One-Click"})
    assert response.status_code == 200
    assert "<b>sam@example.com</b> will not receive the weekly ETT% report" in body(response)
    subscription.refresh_from_db()
    assert not subscription.enabled and subscription.unsubscribed_at is not None
    assert statuses() == {"2026-W10": "sent", "2026-W11": "cancelled",
                          "2026-W12": "cancelled"}
    first = subscription.unsubscribed_at
    assert client.post(url, {"List-Unsubscribe": "One-Click"}).status_code == 200  # again
    subscription.refresh_from_db()
    assert subscription.unsubscribed_at == first  # the first click is when it stopped
    assert "is already unsubscribed" in body(client.get(url))


@pytest.mark.parametrize("mangle", [
    lambda token: token[:-1] + ("A" if token[-1] != "A" else "B"),  # signature altered
    lambda token: token[: len(token) // 2],  # cut short by a mail client
    lambda token: "not-a-token",
])
def test_a_tampered_token_is_a_400_page(subscription: Subscription, client: Client,
                                        mangle: Any) -> None:
    """A mangled link is the user's problem to hear about, never a 500."""
    url = f"/reports/unsubscribe/{mangle(make_token(subscription.pk))}/"
    for response in (client.get(url), client.post(url, {"List-Unsubscribe": "One-Click"})):
        assert response.status_code == 400
        assert "This unsubscribe link is not valid (it may be cut short or altered)" in body(
            response)
    subscription.refresh_from_db()
    assert subscription.enabled


def test_other_signed_values_do_not_pass(subscription: Subscription, client: Client) -> None:
    """Another salt (any other signed value of the site) or a payload of the wrong shape."""
    for token in (signing.dumps({"s": subscription.pk}),
                  signing.dumps({"s": str(subscription.pk)}, salt=SALT),
                  signing.dumps([subscription.pk], salt=SALT)):
        response = client.post(f"/reports/unsubscribe/{token}/")
        assert response.status_code == 400
        assert "This unsubscribe link is not valid" in body(response)
    subscription.refresh_from_db()
    assert subscription.enabled


def test_an_old_link_expires(subscription: Subscription, client: Client,
                             settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forwarded old mail stops working after ETT_UNSUBSCRIBE_MAX_AGE_DAYS, not before."""
    settings.ETT_UNSUBSCRIBE_MAX_AGE_DAYS = 3
    expired = old_token(subscription.pk, 3 * 86400 + 60, monkeypatch)
    response = client.post(f"/reports/unsubscribe/{expired}/")
    assert response.status_code == 400
    assert "This unsubscribe link has expired; change your subscription on the report " \
           "settings page instead." in body(response)
    subscription.refresh_from_db()
    assert subscription.enabled
    recent = old_token(subscription.pk, 2 * 86400, monkeypatch)  # inside the three days
    assert client.post(f"/reports/unsubscribe/{recent}/").status_code == 200
    subscription.refresh_from_db()
    assert not subscription.enabled


def test_a_deleted_subscription_is_a_404_page(subscription: Subscription,
                                              client: Client) -> None:
    """A link outliving its subscription says so instead of failing."""
    token = make_token(subscription.pk)
    subscription.delete()
    for response in (client.get(f"/reports/unsubscribe/{token}/"),
                     client.post(f"/reports/unsubscribe/{token}/")):
        assert response.status_code == 404
        assert "This subscription no longer exists" in body(response)


def test_a_link_from_before_a_resubscribe_no_longer_unsubscribes(
        subscription: Subscription, client: Client) -> None:
    """Issue 40, 5g: a token valid 90 days unsubscribed a user who had since subscribed
    again. Tokens carry the subscription's version, which turning it back on raises: the
    old link is a 410 page that says why, and changes nothing; the new one works."""
    old_link = f"/reports/unsubscribe/{make_token(subscription.pk, subscription.version)}/"
    assert client.post(old_link, {"List-Unsubscribe": "One-Click"}).status_code == 200
    sam = Client()
    sam.force_login(subscription.user)
    assert sam.post("/reports/settings/", {"enabled": "on", "email": "sam@example.com",
                                           "time_zone": "UTC", "fleet": "on"}
                    ).status_code == 302  # subscribed again
    subscription.refresh_from_db()
    assert subscription.enabled and subscription.version == 2
    for response in (client.get(old_link),
                     client.post(old_link, {"List-Unsubscribe": "One-Click"})):
        assert response.status_code == 410
        page = body(response)
        assert "This link is from before you subscribed again" in page
        assert ("This unsubscribe link is from a report sent before you subscribed again, so "
                "it no longer unsubscribes you: use the link in your latest report, or turn "
                "the report off on the report settings page.") in page
        assert "The weekly ETT% report still goes to <b>sam@example.com</b>." in page
    subscription.refresh_from_db()
    assert subscription.enabled and subscription.unsubscribed_at is None

    new_link = f"/reports/unsubscribe/{make_token(subscription.pk, 2)}/"
    assert client.post(new_link, {"List-Unsubscribe": "One-Click"}).status_code == 200
    subscription.refresh_from_db()
    assert not subscription.enabled


def test_only_turning_it_back_on_raises_the_version(subscription: Subscription) -> None:
    """Edits that leave it on, and turning it off, keep every link sent so far working;
    a link signed before versions existed (no ``v``) is version 1."""
    subscription.time_zone = "Asia/Tokyo"
    subscription.save()
    loaded = Subscription.objects.get(pk=subscription.pk)
    loaded.enabled = False
    loaded.save(update_fields=["enabled"])
    assert Subscription.objects.get(pk=subscription.pk).version == 1
    legacy = signing.dumps({"s": subscription.pk}, salt=SALT, compress=False)
    assert read_token(legacy) == (subscription.pk, 1)
    again = Subscription.objects.get(pk=subscription.pk)
    again.enabled = True
    again.save(update_fields=["enabled"])
    assert Subscription.objects.get(pk=subscription.pk).version == 2
    for payload in ({"s": subscription.pk, "v": "2"}, {"s": subscription.pk, "v": True}):
        with pytest.raises(TokenError, match="not valid"):
            read_token(signing.dumps(payload, salt=SALT))


def test_the_mail_carries_a_link_of_the_current_version(subscription: Subscription) -> None:
    subscription.version = 7
    rendered = render_for(subscription, IsoWeek.parse("2026-W11"), ReportCache())
    token = rendered.unsubscribe_url.rstrip("/").rsplit("/", 1)[1]
    assert read_token(token) == (subscription.pk, 7)


@pytest.fixture
def fleet() -> None:
    """test_weekly_query's fleet: W10 and W11 of March 2026, and one job in W12."""
    events: list[dict[str, Any]] = []
    events += day_job("prev-a", 3, 2, "ads", ("compile", 2), 8)
    events += day_job("prev-b", 8, 1, "feed", ("checkpoint_save", 5), 5)
    events += day_job("this-a", 9, 2, "ads", ("compile", 1), 9)
    events += day_job("this-b", 11, 4, "feed", ("checkpoint_save", 1), 9)
    events += day_job("this-c", 15, 1, "ads", ("compile", 0), 10)
    events += day_job("next-a", 16, 8, "ads", ("compile", 5), 5)
    store(events)


@pytest.fixture
def viewer(client: Client) -> Client:
    """A logged-in user who is not staff and not subscribed."""
    client.force_login(User.objects.create_user("viewer", email="viewer@example.com"))
    return client


@pytest.fixture
def other() -> User:
    """Someone subscribed to evaluation alone, without the rest of the fleet."""
    user = User.objects.create_user("other", email="other@example.com")
    Subscription.objects.create(user=user, email="other@example.net", fleet=False,
                                components=["evaluation"])
    return user


def srcdoc(page: str) -> str:
    """The report's HTML part, as the iframe holds it."""
    match = re.search(r'<iframe class="email-preview"[^>]* srcdoc="([^"]*)"', page)
    assert match is not None
    return html.unescape(match.group(1))


def test_preview_shows_the_report_with_its_chart(fleet: None, viewer: Client) -> None:
    """The page shows what the mail would: subject, HTML part, chart inline as data:."""
    response = viewer.get("/reports/preview/?week=2026-W11")
    assert response.status_code == 200
    raw = response.content.decode()
    page = html.unescape(raw)
    assert f'<b class="subject">{W11_SUBJECT}</b>' in page
    assert "As viewer@example.com would receive it (not subscribed; defaults shown)" in page
    assert "<script" not in srcdoc(raw)
    report = srcdoc(raw)
    assert f"<title>{W11_SUBJECT}</title>" in report
    chart = re.search(r'<img src="(/reports/preview/chart\.png\?week=2026-W11)"', report)
    assert chart is not None
    png = viewer.get(chart.group(1))
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert "cid:" not in report  # the mail's inline reference is replaced on the page
    assert '<a href="?week=2026-W10">← 2026-W10</a>' in page
    assert '<a href="?week=2026-W12">2026-W12 →</a>' in page
    assert "this-b" in report and "this-a" in report  # the top jobs


def test_the_previews_links_start_with_the_configured_base_url(
        fleet: None, viewer: Client, settings: Settings) -> None:
    """The preview is the mail: its links go where the mail's go (ETT_BASE_URL, which the
    demo sets to the address it serves), only the chart is fetched from this page."""
    settings.ETT_BASE_URL = "http://127.0.0.1:8123"
    Rollout.objects.create(name="compile cache", component="pt2_compiler",
                           at=datetime(2026, 3, 4, 12, tzinfo=UTC), scope={})
    report = srcdoc(viewer.get("/reports/preview/?week=2026-W11").content.decode())
    hrefs = re.findall(r'href="([^"]*)"', report)
    assert len(hrefs) >= 5 and "http://127.0.0.1:8123/rollouts/" in " ".join(hrefs)
    assert all(h.startswith("http://127.0.0.1:8123/") for h in hrefs), hrefs
    assert "localhost" not in report


def test_the_preview_escapes_what_jobs_are_called(fleet: None, viewer: Client) -> None:
    """Both parts are already-rendered templates (the text one unescaped, as mail text must
    be): the page must escape them again, or a job name could run script on it."""
    evil = '<img src=x onerror="alert(1)">'
    store(day_job(evil, 10, 8, "ads", ("compile", 4), 4))
    raw = viewer.get("/reports/preview/?week=2026-W11").content.decode()
    assert evil not in raw
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in raw  # the text part, escaped
    assert html.escape(evil) in srcdoc(raw)  # the HTML part escapes it itself
    assert re.search(r'<pre class="email-text">[^<]*TOP \d+ JOBS', raw)  # still one text


def test_preview_defaults_to_the_last_complete_week(fleet: None, viewer: Client) -> None:
    """No week given: the one Monday's report covers, with no step into the future."""
    response = viewer.get("/reports/preview/")
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert re.search(r'<b class="subject">ETT% \d{4}-W\d\d: no training data this week</b>',
                     page)
    assert "→</a>" not in page  # nothing newer than the last complete week to step to


@pytest.mark.parametrize(("query", "reason"), [
    ("week=2026-W99", "bad parameters: week: 2026 has ISO weeks 1 to 53, not 99"),
    ("week=next", "bad parameters: week: week must look like 2026-W47, not 'next'"),
])
def test_bad_week_is_a_400_naming_it(viewer: Client, query: str, reason: str) -> None:
    """Bad GET parameters answer like every other page: 400 naming the parameter."""
    response = viewer.get(f"/reports/preview/?{query}")
    assert response.status_code == 400
    assert response.content.decode() == reason


def test_only_staff_preview_someone_else(fleet: None, viewer: Client, other: User) -> None:
    """Someone else's report shows their address and scope: staff only."""
    response = viewer.get("/reports/preview/?week=2026-W11&user=other")
    assert response.status_code == 403
    assert "other@example.net" not in response.content.decode()


def test_staff_previews_another_users_report(fleet: None, client: Client,
                                             other: User) -> None:
    """Staff see exactly that user's report (their scope), and a typo is a 400."""
    client.force_login(User.objects.create_user("boss", is_superuser=True))
    response = client.get("/reports/preview/?week=2026-W11&user=other")
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert "As other@example.net would receive it." in page
    report = srcdoc(response.content.decode())
    assert re.search(r"<b>evaluation</b> <span[^>]*>yours</span>", report)
    assert "checkpointing" not in report  # fleet off: only what they follow
    assert '<a href="?week=2026-W10&user=other">' in page  # stepping keeps the user
    assert 'name="user" value="other"' in page
    response = client.get("/reports/preview/?week=2026-W11&user=ghost")
    assert response.status_code == 400
    assert response.content.decode() == "bad parameters: user: no user named 'ghost'"


def test_anonymous_preview_is_sent_to_log_in(client: Client) -> None:
    """Fleet numbers are for logged-in users only."""
    response = client.get("/reports/preview/?week=2026-W11")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_preview_chart_is_the_mails_chart_and_refuses_bad_weeks(fleet: None,
                                                                    viewer: Client) -> None:
    """The page's chart URL answers the very PNG the week's mail attaches; a bad week is a
    400 naming the parameter; it is behind the login like the page."""
    from ettweb.queries import IsoWeek
    from ettweb.reports.content import ReportCache, render_for

    week = IsoWeek.parse("2026-W11")
    mailed = render_for(None, week, ReportCache()).chart_png
    assert viewer.get("/reports/preview/chart.png?week=2026-W11").content == mailed
    bad = viewer.get("/reports/preview/chart.png?week=2026-W99")
    assert bad.status_code == 400 and "week" in bad.content.decode()
    anonymous = Client().get("/reports/preview/chart.png?week=2026-W11")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
