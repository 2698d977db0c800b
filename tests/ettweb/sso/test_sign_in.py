"""Single sign-on end to end against a real provider process, through Django's test client:
the code flow, the role from the groups claim at every sign-in, and every refusal a page that
names what failed (never a 500, nothing stored half-way).

The browser test (test_sso_browser.py) walks the same flow in Chromium; here each rule gets
its own test, quick enough to run them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from ettweb.access.models import ComponentOwner
from ettweb.access.roles import ADMIN, OWNER, VIEWER, owned_components, role_of
from ettweb.sso.models import SsoIdentity
from tests.ettweb.sso.provider import (
    ADMINS,
    CLIENT_ID,
    VIEWERS,
    MockProvider,
    free_port,
    query,
    running_provider,
)


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockProvider]:
    with running_provider(tmp_path_factory.mktemp("idp")) as started:
        yield started


@pytest.fixture(scope="module")
def expiring_idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockProvider]:
    """A provider whose tokens expired an hour before they were issued."""
    with running_provider(tmp_path_factory.mktemp("idp"), "--token-max-age=-3600") as started:
        yield started


def sign_in(client: Client, idp: MockProvider, sub: str, *, next_page: str = "") -> HttpResponse:
    """The whole code flow: ETT sends the browser to the provider, the person signs in there,
    the provider sends the browser back to ETT's callback."""
    start = client.get(reverse("sso:login") + (f"?{urlencode({'next': next_page})}"
                                               if next_page else ""))
    assert start.status_code == 302, start.content.decode()
    assert start["Location"].startswith(f"{idp.issuer}/oauth2/authorize?")
    callback = idp.approve(start["Location"], sub)
    assert callback.startswith("http://testserver/accounts/sso/callback/?")
    response: HttpResponse = client.get(callback)
    return response


def refusal(response: HttpResponse, status: int) -> str:
    """The refusal page's reason, after checking it is one (and nobody is logged in)."""
    assert response.status_code == status, response.content.decode()
    text = response.content.decode()
    assert "<h1>Sign-in refused</h1>" in text
    reason = text.split('id="reason">', 1)[1].split("</p>", 1)[0]
    return reason


def logged_in(client: Client) -> User | None:
    user = get_user(client)
    return user if isinstance(user, User) and user.is_authenticated else None


@pytest.mark.django_db
def test_first_sign_in_makes_the_account_with_the_role_of_its_groups(
        client: Client, idp: MockProvider) -> None:
    idp.set_person("sub-dana", preferred_username="dana", email="dana@example.com",
                   groups=["ett-owner:checkpointing", "ett-owner:pt2_compiler", "staff"])
    with idp.settings():
        response = sign_in(client, idp, "sub-dana")
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:jobs")
    dana = User.objects.get(username="dana")
    assert logged_in(client) == dana
    assert (dana.email, dana.has_usable_password()) == ("dana@example.com", False)
    assert role_of(dana) == OWNER
    assert owned_components(dana) == {"checkpointing", "pt2_compiler"}
    identity = SsoIdentity.objects.get(user=dana)
    assert (identity.issuer, identity.subject) == (idp.issuer, "sub-dana")
    assert identity.groups == ["ett-owner:checkpointing", "ett-owner:pt2_compiler", "staff"]


@pytest.mark.django_db
def test_a_group_change_takes_effect_at_the_next_sign_in(idp: MockProvider) -> None:
    idp.set_person("sub-eve", preferred_username="eve", groups=["ett-owner:checkpointing"])
    with idp.settings():
        sign_in(Client(), idp, "sub-eve")
        eve = User.objects.get(username="eve")
        assert role_of(eve) == OWNER
        idp.set_person("sub-eve", preferred_username="eve-renamed", groups=[ADMINS])
        assert role_of(User.objects.get(pk=eve.pk)) == OWNER  # until the next sign-in
        sign_in(Client(), idp, "sub-eve")
        eve = User.objects.get(pk=eve.pk)
        assert (role_of(eve), eve.is_superuser, eve.is_staff) == (ADMIN, True, True)
        assert not ComponentOwner.objects.filter(user=eve).exists()
        idp.set_person("sub-eve", preferred_username="eve")  # no groups claim at all
        sign_in(Client(), idp, "sub-eve")
    eve = User.objects.get(pk=eve.pk)
    assert (role_of(eve), eve.is_superuser, eve.username) == (VIEWER, False, "eve")
    assert User.objects.count() == 1  # one person, one account, whatever the name says


@pytest.mark.django_db
def test_sign_in_returns_to_the_page_asked_for(client: Client, idp: MockProvider) -> None:
    idp.set_person("sub-fay", preferred_username="fay")
    with idp.settings():
        response = sign_in(client, idp, "sub-fay", next_page="/fleet/?team=ads")
        assert response["Location"] == "/fleet/?team=ads"
        away = sign_in(Client(), idp, "sub-fay", next_page="https://evil.example/")
    assert away["Location"] == reverse("dashboard:jobs")  # never off the site


@pytest.mark.django_db
def test_the_log_in_page_offers_both_and_local_log_in_still_works(
        client: Client, idp: MockProvider) -> None:
    User.objects.create_user("local", password="local-password-1")
    page = client.get(reverse("login") + "?next=/fleet/").content.decode()
    assert "Sign in with" not in page  # off: no button
    with idp.settings():
        page = client.get(reverse("login") + "?next=/fleet/").content.decode()
        assert 'href="/accounts/sso/login/?next=/fleet/">Sign in with Mock IdP</a>' in page
        answer = client.post(reverse("login"), {"username": "local",
                                                "password": "local-password-1"})
    assert answer.status_code == 302
    assert logged_in(client) == User.objects.get(username="local")


@pytest.mark.django_db
def test_viewer_groups_let_in_only_their_members(idp: MockProvider) -> None:
    idp.set_person("sub-gus", preferred_username="gus", groups=["contractors"])
    idp.set_person("sub-hal", preferred_username="hal", groups=[VIEWERS])
    client = Client()
    with idp.settings(ETT_OIDC_VIEWER_GROUPS=[VIEWERS]):
        reason = refusal(sign_in(client, idp, "sub-gus"), 403)
        assert sign_in(Client(), idp, "sub-hal").status_code == 302
    assert reason.startswith("claim groups: you are in contractors, and ETT lets in only "
                             "ett-admins, ett-users (ETT_OIDC_VIEWER_GROUPS")
    assert logged_in(client) is None
    assert list(User.objects.values_list("username", flat=True)) == ["hal"]
    assert role_of(User.objects.get(username="hal")) == VIEWER


@pytest.mark.django_db
def test_a_local_accounts_username_is_refused_never_taken_over(
        client: Client, idp: MockProvider) -> None:
    local = User.objects.create_user("ivy", password="local-password-2", email="ivy@example.com")
    idp.set_person("sub-ivy", preferred_username="ivy", email="ivy@example.com",
                   groups=[ADMINS])
    with idp.settings():
        reason = refusal(sign_in(client, idp, "sub-ivy"), 409)
    assert reason.startswith("claim preferred_username: the username &#x27;ivy&#x27; belongs "
                             "to an ETT account that is not this provider&#x27;s person")
    local.refresh_from_db()
    assert (logged_in(client), local.is_superuser, SsoIdentity.objects.count()) == (
        None, False, 0)


@pytest.mark.django_db
def test_a_deactivated_account_is_refused_and_its_sessions_end(idp: MockProvider) -> None:
    idp.set_person("sub-jo", preferred_username="jo", groups=[ADMINS])
    open_session = Client()
    with idp.settings():
        sign_in(open_session, idp, "sub-jo")
        assert open_session.get(reverse("dashboard:fleet")).status_code == 200
        User.objects.filter(username="jo").update(is_active=False)
        client = Client()
        reason = refusal(sign_in(client, idp, "sub-jo"), 403)
    assert "the ETT account &#x27;jo&#x27; is deactivated" in reason
    assert logged_in(client) is None
    assert open_session.get(reverse("dashboard:fleet")).status_code == 302  # to the log-in


@pytest.mark.django_db
def test_bad_claims_are_refused_naming_the_claim(idp: MockProvider) -> None:
    cases = {
        "sub-k1": ({"preferred_username": "k1", "groups": "ett-owner:" + "x" * 65},
                   "claim groups: group &#x27;ett-owner:xxx"),
        "sub-k2": ({"preferred_username": "k2", "groups": [1, 2]},
                   "claim groups: must be a list of group names"),
        "sub-k3": ({"email": "k3@example.com", "groups": []},
                   "claim preferred_username: missing"),
        "sub-k4": ({"preferred_username": "has space"},
                   "claim preferred_username: &#x27;has space&#x27; is not a username"),
        "sub-k5": ({"preferred_username": "k5", "email": "not-an-address"},
                   "claim email: not an address"),
    }
    with idp.settings():
        for sub, (claims, expected) in cases.items():
            idp.set_person(sub, **claims)
            client = Client()
            reason = refusal(sign_in(client, idp, sub), 400)
            assert reason.startswith(expected), (sub, reason)
            assert logged_in(client) is None
    assert not User.objects.exists()


@pytest.mark.django_db
def test_tampered_callbacks_are_refused(idp: MockProvider) -> None:
    idp.set_person("sub-lee", preferred_username="lee", groups=[ADMINS])
    callback = reverse("sso:callback")
    client = Client()
    with idp.settings():
        assert refusal(client.get(callback), 400).startswith("code parameter: missing")
        assert refusal(client.get(f"{callback}?code=abc&state=forged"), 400).startswith(
            "state parameter: no sign-in this browser started has it")
        # The state of a sign-in this browser started, with a code the provider never issued.
        start = client.get(reverse("sso:login"))
        state = query(start["Location"])["state"]
        forged = refusal(client.get(f"{callback}?{urlencode({'code': 'forged', 'state': state})}"),
                         400)
        assert forged.startswith("code parameter: the provider refused it (invalid_grant)")
        # A real callback, replayed: the state was used up by the first.
        real = idp.approve(client.get(reverse("sso:login"))["Location"], "sub-lee")
        assert client.get(real).status_code == 302
        client.logout()
        assert refusal(client.get(real), 400).startswith("state parameter")
        # The provider's own refusal; an error code that is not one is not repeated.
        start = client.get(reverse("sso:login"))
        state = query(start["Location"])["state"]
        denied = refusal(client.get(f"{callback}?error=access_denied&state={state}"), 403)
        assert denied == ("error parameter: the identity provider did not sign you in "
                          "(access_denied)")
        assert refusal(client.get(f"{callback}?code=x&state={state}"), 400).startswith(
            "state parameter")  # that sign-in is over
        odd = refusal(client.get(f"{callback}?error=Call+0800+now"), 403)
        assert "0800" not in odd and "an unrecognised error" in odd
    assert logged_in(client) is None
    assert User.objects.count() == 1  # lee, from the one real callback


@pytest.mark.django_db
def test_an_expired_id_token_is_refused(client: Client, expiring_idp: MockProvider) -> None:
    expiring_idp.set_person("sub-mo", preferred_username="mo", groups=[ADMINS])
    with expiring_idp.settings():
        reason = refusal(sign_in(client, expiring_idp, "sub-mo"), 400)
    assert reason == "ID token: expired (claim exp is in the past); start again"
    assert (logged_in(client), User.objects.exists()) == (None, False)


@pytest.mark.django_db
def test_a_code_issued_to_another_client_is_refused(client: Client, idp: MockProvider) -> None:
    """A code the provider gave another application, brought to ETT's callback with this
    browser's state: the provider refuses to exchange it for ETT."""
    idp.set_person("sub-ned", preferred_username="ned")
    with idp.settings():
        start = client.get(reverse("sso:login"))
        callback = idp.approve(start["Location"].replace(CLIENT_ID, "someone-else"), "sub-ned")
        reason = refusal(client.get(callback), 400)
    assert reason == "code parameter: the provider refused it (invalid_grant): it was used " \
                     "already, has expired, or belongs to another sign-in; start again"


@pytest.mark.django_db
def test_sso_off_or_provider_down_is_a_page_naming_the_setting(client: Client,
                                                               idp: MockProvider) -> None:
    off = refusal(client.get(reverse("sso:login")), 404)
    assert off.startswith("single sign-on is off (ETT_OIDC_ISSUER is not set)")
    assert refusal(client.get(reverse("sso:callback")), 404) == off
    down = f"http://127.0.0.1:{free_port()}"
    with idp.settings(ETT_OIDC_ISSUER=down):
        reason = refusal(client.get(reverse("sso:login")), 502)
    assert reason.startswith(f"ETT_OIDC_ISSUER: the provider&#x27;s discovery document "
                             f"{down}/.well-known/openid-configuration cannot be fetched")
    with idp.settings(ETT_OIDC_SIGN_ALGO="ES256"):
        reason = refusal(client.get(reverse("sso:login")), 502)
    assert reason == "ETT_OIDC_SIGN_ALGO: the provider signs ID tokens with RS256, not ES256"
