"""A real OpenID Connect provider for the single sign-on tests: ``oidc-provider-mock`` (Flask,
RS256, discovery, JWKS, userinfo) in its own process on a free loopback port.

It accepts any client id and secret and any redirect URI, shows a form where the person's
``sub`` is typed, and takes each person's claims (groups included) from ``PUT /users/<sub>``:
what a test changes there is what the next sign-in's ID token and userinfo say.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from django.test import override_settings

from ettweb.sso import discovery

CLIENT_ID = "ett-tests"
CLIENT_SECRET = "not-a-real-secret"
ADMINS = "ett-admins"
VIEWERS = "ett-users"


@dataclass(frozen=True)
class MockProvider:
    """One running provider: its issuer URL and its log."""

    issuer: str
    log: Path

    def set_person(self, sub: str, **claims: Any) -> None:
        """What the provider says about ``sub`` from now on."""
        answer = requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=10)
        assert answer.status_code == 204, answer.text

    def approve(self, authorize_url: str, sub: str) -> str:
        """Sign ``sub`` in on the provider's form; the callback URL it sends the browser to."""
        answer = requests.post(authorize_url, data={"sub": sub}, allow_redirects=False,
                               timeout=10)
        assert answer.status_code == 302, answer.text
        return str(answer.headers["Location"])

    def settings(self, **overrides: Any) -> override_settings:
        """ETT's settings for this provider (its groups: ``ett-admins`` make admins)."""
        discovery.forget()
        return override_settings(**{
            "ETT_OIDC_ISSUER": self.issuer, "ETT_OIDC_CLIENT_ID": CLIENT_ID,
            "ETT_OIDC_CLIENT_SECRET": CLIENT_SECRET, "ETT_OIDC_PROVIDER_NAME": "Mock IdP",
            "ETT_OIDC_ADMIN_GROUPS": [ADMINS], "ETT_OIDC_TIMEOUT_S": 10.0, **overrides})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running_provider(log_dir: Path, *options: str) -> Iterator[MockProvider]:
    """Start the provider (``options`` are its command line's), wait until its discovery
    document answers, stop it afterwards."""
    port = free_port()
    log = log_dir / f"oidc-provider-{port}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), *options],
            stdout=sink, stderr=subprocess.STDOUT)
    issuer = f"http://127.0.0.1:{port}"
    try:
        _wait_for(issuer, process, log)
        yield MockProvider(issuer, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        discovery.forget()


def _wait_for(issuer: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the provider exited {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(discovery.discovery_url(issuer), timeout=2).ok:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the provider did not answer in 30 s:\n{log.read_text()}")


def query(url: str) -> dict[str, str]:
    """A URL's query parameters (the last value of each)."""
    return {key: values[-1] for key, values in parse_qs(urlsplit(url).query).items()}
