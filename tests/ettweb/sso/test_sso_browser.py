"""Single sign-on in real Chromium against a real provider process (oidc-provider-mock on a
free loopback port): sign in from the log-in page's button, the role from the groups claim,
a group change at the provider taking effect at the next sign-in, and a tampered callback
and an expired ID token refused with a page that says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import Browser, Page
from pytest_django.live_server_helper import LiveServer

from ettweb.access.roles import ADMIN, OWNER, owned_components, role_of
from tests.ettweb.sso.provider import ADMINS, MockProvider, running_provider

WAIT_MS = 20_000


@pytest.fixture
def idps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockProvider,
                                                                      MockProvider]]:
    """A provider, and one whose ID tokens expired an hour before they were issued."""
    logs = tmp_path_factory.mktemp("idp")
    with running_provider(logs) as idp, \
            running_provider(logs, "--token-max-age=-3600") as expiring:
        yield idp, expiring


def sign_in(page: Page, live_server: LiveServer, sub: str, next_page: str = "/") -> None:
    """From ETT's log-in page, through the provider's, back to ETT."""
    page.goto(f"{live_server.url}/accounts/login/?next={next_page}")
    page.click("#sso-login")
    page.wait_for_selector('input[name="sub"]', timeout=WAIT_MS)  # the provider's form
    page.fill('input[name="sub"]', sub)
    page.click('button:has-text("Authorize")')
    page.wait_for_url(f"{live_server.url}/**", timeout=WAIT_MS)
    page.wait_for_load_state("load")


def log_out(page: Page) -> None:
    page.click("header form button")
    page.wait_for_selector("#id_username", timeout=WAIT_MS)


@pytest.mark.browser
@pytest.mark.integration
def test_sign_in_role_group_change_and_refusals_in_chromium(
        idps: tuple[MockProvider, MockProvider], live_server: LiveServer,
        browser: Browser) -> None:
    idp, expiring = idps
    idp.set_person("sub-dana", preferred_username="dana", email="dana@example.com",
                   groups=["ett-owner:checkpointing"])
    page = browser.new_page()
    try:
        _walk(page, idp, expiring, live_server)
    finally:
        page.close()
        # The role checks ran beside playwright's event loop, on a connection of their own
        # that the test database's teardown would otherwise find still open.
        connections.close_all()


def _walk(page: Page, idp: MockProvider, expiring: MockProvider,
          live_server: LiveServer) -> None:
    with idp.settings():
        sign_in(page, live_server, "sub-dana", next_page="/fleet/")
        assert page.url == f"{live_server.url}/fleet/"
        assert page.inner_text("header form button") == "Log out dana"
        assert page.locator('header a:has-text("Admin")').count() == 0
        dana = User.objects.get(username="dana")
        assert (role_of(dana), owned_components(dana)) == (OWNER, {"checkpointing"})

        idp.set_person("sub-dana", preferred_username="dana", email="dana@example.com",
                       groups=[ADMINS])
        log_out(page)
        sign_in(page, live_server, "sub-dana")
        assert page.locator('header a:has-text("Admin")').count() == 1
        dana = User.objects.get(username="dana")
        assert (role_of(dana), owned_components(dana)) == (ADMIN, frozenset())
        log_out(page)

        tampered = page.goto(f"{live_server.url}/accounts/sso/callback/?code=stolen&state=guess")
        assert tampered is not None and tampered.status == 400
        assert page.inner_text("h1") == "Sign-in refused"
        assert page.inner_text("#reason").startswith(
            "state parameter: no sign-in this browser started has it")

    with expiring.settings():
        expiring.set_person("sub-dana", preferred_username="dana", groups=[ADMINS])
        sign_in(page, live_server, "sub-dana")
        assert page.inner_text("#reason") == (
            "ID token: expired (claim exp is in the past); start again")
        page.click('a:has-text("Back to the log-in page")')
        page.wait_for_selector("#id_username", timeout=WAIT_MS)
        assert page.inner_text("#sso-login") == "Sign in with Mock IdP"
