"""``POST /api/v1/collectors/self`` (issue 27, item 7): a collector, signing with its credential
instead of logging in, hears whether the server accepts it. A good credential is 200; an
unknown one or a bad signature 401 and a revoked one 403, each with the server's reason and
``"verdict": "rejected"``; a missing or malformed header, a timestamp out of the window and a
replay are 401 ``"unverified"`` naming what is wrong; a bad source is a 400. Never a 500, and
only a valid signature writes anything."""

from __future__ import annotations

import io
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.auth import CHECK_HEADERS, CHECK_PATH, check_body, sign_batch
from ettweb.ingest.credentials import CHECK_SKEW_S, new_credential, prune_nonces
from ettweb.ingest.models import CheckNonce, CollectorCredential, CollectorRejection
from tests.examples import examples

pytestmark = pytest.mark.django_db
SOURCE = "gpu-node-17"


@pytest.fixture
def credential() -> CollectorCredential:
    return new_credential("node-check")


def signed(collector_id: str, secret: str, source: str = SOURCE, **overrides: Any) -> dict[str,
                                                                                          str]:
    """The headers the agent sends (``collector.verdict``), as Django test-client kwargs."""
    auth = sign_batch(collector_id, secret, [check_body(source)], **overrides)
    return {f"HTTP_{CHECK_HEADERS[field].upper().replace('-', '_')}": str(value)
            for field, value in auth.items()}


def ask(client: Client, headers: dict[str, str], source: str = SOURCE) -> tuple[int, dict[str,
                                                                                          Any]]:
    response = client.post(f"{CHECK_PATH}?{urlencode({'source': source})}", **headers)
    return response.status_code, response.json()


def test_a_good_credential_is_accepted(client: Client, credential: CollectorCredential) -> None:
    status, body = ask(client, signed(credential.collector_id, credential.secret))
    assert (status, body) == (200, {"verdict": "ok", "collector": credential.collector_id,
                                    "source": SOURCE})
    assert CheckNonce.objects.count() == 1
    assert not CollectorRejection.objects.exists()


def test_a_revoked_credential_is_a_403_and_the_node_is_recorded_rejected(
        client: Client, credential: CollectorCredential) -> None:
    call_command("ett_collector", "revoke", credential.name, stdout=io.StringIO())
    status, body = ask(client, signed(credential.collector_id, credential.secret))
    reason = f"revoked collector {credential.collector_id!r}"
    assert (status, body) == (403, {"error": reason, "verdict": "rejected"})
    row = CollectorRejection.objects.get()
    assert (row.source, row.collector_id, row.reason, row.refused, row.refusals) == (
        SOURCE, credential.collector_id, reason, "credential check", 1)


@pytest.mark.parametrize(("who", "reason"), [
    ("unknown", "unknown collector 'col-nobody'"),
    ("wrong secret", "bad signature"),
    ("other source", "bad signature"),  # signed for another node: not this node's answer
])
def test_a_credential_that_does_not_sign_is_a_401_and_writes_nothing(
        client: Client, credential: CollectorCredential, who: str, reason: str) -> None:
    headers = {"unknown": signed("col-nobody", credential.secret),
               "wrong secret": signed(credential.collector_id, "0" * 64),
               "other source": signed(credential.collector_id, credential.secret, "node-x"),
               }[who]
    assert ask(client, headers) == (401, {"error": reason, "verdict": "rejected"})
    # Anyone can send these: they leave no row behind.
    assert not CheckNonce.objects.exists() and not CollectorRejection.objects.exists()


@pytest.mark.parametrize("off_s", [CHECK_SKEW_S + 60, -(CHECK_SKEW_S + 60)])
def test_a_stale_or_future_timestamp_is_refused_naming_the_clock(
        client: Client, credential: CollectorCredential, off_s: float) -> None:
    headers = signed(credential.collector_id, credential.secret, ts=time.time() + off_s)
    status, body = ask(client, headers)
    assert status == 401 and body["verdict"] == "unverified"
    assert body["error"].startswith(f"header X-ETT-Timestamp is {off_s:+.0f} s from the "
                                    "server's clock")
    assert "NTP" in body["error"]
    assert not CheckNonce.objects.exists()


def test_a_replayed_check_is_refused(client: Client, credential: CollectorCredential) -> None:
    headers = signed(credential.collector_id, credential.secret)
    assert ask(client, headers)[0] == 200
    assert ask(client, headers) == (401, {"error": "replayed check (its nonce was seen)",
                                          "verdict": "unverified"})


def test_a_replayed_revoked_check_does_not_count_twice(
        client: Client, credential: CollectorCredential) -> None:
    call_command("ett_collector", "revoke", credential.name, stdout=io.StringIO())
    headers = signed(credential.collector_id, credential.secret)
    assert ask(client, headers)[0] == 403
    assert ask(client, headers)[1]["verdict"] == "unverified"
    assert CollectorRejection.objects.get().refusals == 1


@pytest.mark.parametrize(("header", "value", "reason"), [
    ("collector", None, "missing header X-ETT-Collector"),
    ("ts", None, "missing header X-ETT-Timestamp"),
    ("nonce", None, "missing header X-ETT-Nonce"),
    ("sig", None, "missing header X-ETT-Signature"),
    ("ts", "yesterday", "header X-ETT-Timestamp must be a number"),
    ("ts", "nan", "header X-ETT-Timestamp must be a number"),
    ("ts", "1e999", "header X-ETT-Timestamp must be a number"),
    ("nonce", "xyz", "header X-ETT-Nonce must be 32 hex characters"),
    ("collector", "x" * 65, "header X-ETT-Collector must be 1-64 printable ASCII"),
    ("collector", "col-é", "header X-ETT-Collector must be 1-64 printable ASCII"),
])
def test_a_missing_or_malformed_header_is_named(client: Client, credential: CollectorCredential,
                                                header: str, value: str | None,
                                                reason: str) -> None:
    headers = signed(credential.collector_id, credential.secret)
    key = f"HTTP_{CHECK_HEADERS[header].upper().replace('-', '_')}"
    if value is None:
        del headers[key]
    else:
        headers[key] = value
    status, body = ask(client, headers)
    assert status == 401 and body["verdict"] == "unverified", body
    assert body["error"].startswith(reason), body


@pytest.mark.parametrize("source", ["", "x" * 201, "tab\there", None])
def test_a_bad_source_is_a_400(client: Client, credential: CollectorCredential,
                               source: str | None) -> None:
    headers = signed(credential.collector_id, credential.secret, source or "")
    query = "" if source is None else f"?{urlencode({'source': source})}"
    response = client.post(f"{CHECK_PATH}{query}", **headers)
    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith("source: must be 1-200 printable"), source
    # Without the headers it is a 401 first: nothing is said to an anonymous caller but that.
    assert client.post(CHECK_PATH).status_code == 401


def test_only_post_is_served(client: Client, credential: CollectorCredential) -> None:
    """It records a nonce and, for a revoked credential, a rejection: a GET never writes."""
    headers = signed(credential.collector_id, credential.secret)
    assert client.get(CHECK_PATH, {"source": SOURCE}, **headers).status_code == 405


def test_check_nonces_are_kept_only_for_the_clock_window(
        client: Client, credential: CollectorCredential) -> None:
    assert ask(client, signed(credential.collector_id, credential.secret))[0] == 200
    assert prune_nonces(time.time() + CHECK_SKEW_S) == 0
    assert prune_nonces(time.time() + 2 * CHECK_SKEW_S + 1) == 1
    assert not CheckNonce.objects.exists()


HEADER_VALUES = st.one_of(st.none(), st.text(max_size=80),
                          st.sampled_from(["", "0" * 32, "1e308", "-0", "inf", "col-x"]))


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=st.fixed_dictionaries({field: HEADER_VALUES for field in CHECK_HEADERS}),
       source=st.text(max_size=30))
def test_no_junk_is_a_500(client: Client, values: dict[str, str | None], source: str) -> None:
    headers = {f"HTTP_{CHECK_HEADERS[field].upper().replace('-', '_')}": value
               for field, value in values.items() if value is not None}
    response = client.post(f"{CHECK_PATH}?{urlencode({'source': source})}", **headers)
    assert response.status_code in (400, 401), (response.status_code, response.content[:300])
    if response.status_code == 400:
        assert "\x00" in source or all(values.values()), "a 400 before the headers are checked"
    if "\x00" in source:  # refused before any view (ettweb.platform.middleware.RefuseNulMiddleware)
        assert response.status_code == 400 and b"NUL" in response.content
    else:
        assert response.json()["error"]
