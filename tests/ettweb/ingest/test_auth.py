"""Batch authentication at the worker: unknown, revoked and badly signed batches are
quarantined whole with a reason that names the problem; an authentic batch is stored however
long ago it was signed (issue 13, defect 2), and a replay of one stores nothing new."""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from collector.auth import health_body, sign_batch
from ettweb.ingest.batches import QUARANTINE_RAW_CHARS, UNAUTHENTICATED_SAMPLE_LINES
from ettweb.ingest.credentials import NONCE_TTL_S, prune_nonces, verify_batch
from ettweb.ingest.models import (
    BatchNonce,
    CollectorCredential,
    CollectorHealth,
    Event,
    QuarantinedEvent,
)
from ettweb.ingest.tasks import collector_health, ingest_batch
from tests.ettweb.ingest.conftest import Signer

pytestmark = pytest.mark.django_db


def _quarantine_reasons() -> set[str]:
    return set(QuarantinedEvent.objects.values_list("reason", flat=True))


def test_signed_batch_is_stored_and_its_nonce_claimed(worked_example_lines: list[str],
                                                      sign: Signer) -> None:
    result = ingest_batch(worked_example_lines, "node-1", sign(worked_example_lines))
    assert result["stored"] == len(worked_example_lines) == Event.objects.count()
    assert BatchNonce.objects.count() == 1


@pytest.mark.parametrize(("tamper", "reason"), [
    (lambda auth: None, "missing auth (unsigned batch)"),
    (lambda auth: {**auth, "collector": "col-nobody"}, "unknown collector 'col-nobody'"),
    (lambda auth: {**auth, "sig": "0" * 64}, "bad signature"),
    (lambda auth: {**auth, "nonce": "xyz"}, "auth field 'nonce' must be 32 hex characters"),
])
def test_bad_auth_quarantines_the_whole_batch(worked_example_lines: list[str], sign: Signer,
                                              tamper: object, reason: str) -> None:
    auth = tamper(sign(worked_example_lines))  # type: ignore[operator]
    # apply(): a delivery as the worker runs it (a plain call is trusted in-process code)
    result = ingest_batch.apply(args=(worked_example_lines, "node-1", auth)).get()
    assert result == {"stored": 0, "duplicates": 0,
                      "rejected": len(worked_example_lines), "expired": 0}
    assert Event.objects.count() == 0
    # Unauthenticated: a sample is kept (the first lines), every line counted above.
    sample = UNAUTHENTICATED_SAMPLE_LINES
    assert len(worked_example_lines) > sample
    assert _quarantine_reasons() == {reason}
    rows = list(QuarantinedEvent.objects.order_by("id"))
    assert [row.raw for row in rows] == worked_example_lines[:sample]
    assert sum(row.lines for row in rows) == len(worked_example_lines)  # counted, not kept


def test_a_changed_body_breaks_the_signature(worked_example_lines: list[str],
                                             sign: Signer) -> None:
    auth = sign(worked_example_lines)
    ingest_batch(worked_example_lines[:-1], "node-1", auth)
    assert _quarantine_reasons() == {"bad signature"}


@pytest.mark.parametrize("age_s", [6 * 60, 3 * 86400, -600])
def test_an_authentic_batch_is_stored_however_long_it_waited(
        worked_example_lines: list[str], sign: Signer, age_s: float) -> None:
    """Signed 6 minutes or 3 days before a worker took it (workers down, a backlog, a
    redelivery), or by a node whose clock runs ahead: the agent committed it and will never
    send it again, so refusing it by this clock would lose its events."""
    auth = sign(worked_example_lines, ts=time.time() - age_s)
    result = ingest_batch(worked_example_lines, "n", auth)
    assert result == {"stored": len(worked_example_lines), "duplicates": 0,
                      "rejected": 0, "expired": 0}
    assert not QuarantinedEvent.objects.exists()


def test_a_replay_stores_nothing_new_and_quarantines_nothing(
        worked_example_lines: list[str], sign: Signer) -> None:
    """The same signed batch twice (a broker redelivery, or someone replaying it): its nonce
    is recognised, every event is a duplicate, and the quarantine does not fill up with it."""
    auth = sign(worked_example_lines)
    assert ingest_batch(worked_example_lines, "n", auth)["stored"] == len(worked_example_lines)
    again = ingest_batch(worked_example_lines, "n", auth)
    assert again == {"stored": 0, "duplicates": len(worked_example_lines),
                     "rejected": 0, "expired": 0}
    assert not QuarantinedEvent.objects.exists()
    assert Event.objects.count() == len(worked_example_lines)
    assert BatchNonce.objects.count() == 1


def test_a_replay_after_its_nonce_was_pruned_is_still_all_duplicates(
        worked_example_lines: list[str], sign: Signer) -> None:
    auth = sign(worked_example_lines, ts=time.time() - NONCE_TTL_S - 60)
    ingest_batch(worked_example_lines, "n", auth)
    assert prune_nonces(time.time() + NONCE_TTL_S + 1) == 1
    again = ingest_batch(worked_example_lines, "n", auth)
    assert again == {"stored": 0, "duplicates": len(worked_example_lines),
                     "rejected": 0, "expired": 0}
    assert Event.objects.count() == len(worked_example_lines)


def test_revoked_collector_is_refused(worked_example_lines: list[str], sign: Signer,
                                      credential: CollectorCredential) -> None:
    call_command("ett_collector", "revoke", credential.name, stdout=io.StringIO())
    ingest_batch(worked_example_lines, "n", sign(worked_example_lines))
    assert _quarantine_reasons() == {f"revoked collector '{credential.collector_id}'"}


def test_old_nonces_are_pruned(worked_example_lines: list[str], sign: Signer) -> None:
    now = time.time()
    nonce = verify_batch(sign(worked_example_lines, ts=now), worked_example_lines, now=now)
    BatchNonce.objects.create(nonce=nonce.value, collector_id="c", seen_at=now - NONCE_TTL_S - 1)
    BatchNonce.objects.create(nonce="f" * 32, collector_id="c", seen_at=now)
    assert prune_nonces(now) == 1
    assert list(BatchNonce.objects.values_list("nonce", flat=True)) == ["f" * 32]


def test_create_command_prints_env_lines_that_sign_accepted_batches(
        worked_example_lines: list[str]) -> None:
    out = io.StringIO()
    call_command("ett_collector", "create", "node-7", stdout=out)
    env = dict(line.split("=", 1) for line in out.getvalue().splitlines())
    assert set(env) == {"ETT_COLLECTOR_ID", "ETT_COLLECTOR_SECRET"}
    auth = sign_batch(env["ETT_COLLECTOR_ID"], env["ETT_COLLECTOR_SECRET"], worked_example_lines)
    assert ingest_batch(worked_example_lines, "n", auth)["stored"] == len(worked_example_lines)
    with pytest.raises(CommandError, match="already exists"):
        call_command("ett_collector", "create", "node-7", stdout=io.StringIO())
    listed = io.StringIO()
    call_command("ett_collector", "list", stdout=listed)
    assert "node-7" in listed.getvalue() and env["ETT_COLLECTOR_SECRET"] not in listed.getvalue()
    with pytest.raises(CommandError, match="no collector named 'ghost'"):
        call_command("ett_collector", "revoke", "ghost")


def _stats(**overrides: object) -> dict[str, object]:
    stats: dict[str, object] = {
        "backlog_bytes": 2048, "backlog_events": 10, "shipped_events": 500, "dropped_events": 3,
        "corrupted_records": 1, "last_success_ts": 1_795_000_000.5, "spool_files": 2}
    return stats | overrides


def test_health_report_is_stored_per_collector(sign: Signer,
                                                credential: CollectorCredential) -> None:
    for shipped in (500, 700):  # the latest report replaces the previous one
        stats = _stats(shipped_events=shipped)
        collector_health("node-1", stats, sign([health_body("node-1", stats)]))
    health = CollectorHealth.objects.get()
    assert (health.source, health.collector_id) == ("node-1", credential.collector_id)
    assert (health.shipped_events, health.dropped_events, health.backlog_bytes) == (700, 3, 2048)


def test_an_older_health_report_delivered_late_does_not_replace_a_newer_one(
        sign: Signer) -> None:
    """The broker may redeliver an old report after a newer one (issue 13): the server keeps
    the newest by the agent's (report_epoch, report_seq); a restarted agent's (later epoch,
    counter from 1) is newer again."""
    def report(epoch: float, seq: int, shipped: int) -> None:
        stats = {**_stats(shipped_events=shipped), "report_epoch": epoch, "report_seq": seq}
        collector_health("node-1", stats, sign([health_body("node-1", stats)]))

    report(1000.0, 7, shipped=700)
    report(1000.0, 5, shipped=500)  # late
    report(999.0, 9, shipped=400)  # an earlier run's, later still
    assert CollectorHealth.objects.get().shipped_events == 700
    report(2000.0, 1, shipped=900)  # the agent restarted
    assert (CollectorHealth.objects.get().shipped_events,
            CollectorHealth.objects.get().report_seq) == (900, 1)


def test_a_replayed_or_relabelled_health_report_is_refused(
        sign: Signer, caplog: pytest.LogCaptureFixture) -> None:
    """Anyone who reads the broker holds genuine reports: stored once, one cannot be stored
    again (its nonce is recorded with it), nor under another collector's name (the source is
    signed), nor pass for a current one when signed the old way (stats only)."""
    stats = {**_stats(shipped_events=500), "report_epoch": 1000.0, "report_seq": 1}
    auth = sign([health_body("node-1", stats)])
    collector_health("node-1", stats, auth)
    assert CollectorHealth.objects.get().shipped_events == 500

    collector_health("node-1", stats, auth)  # the same message again
    collector_health("node-2", stats, auth)  # relabelled as another collector
    assert list(CollectorHealth.objects.values_list("source", flat=True)) == ["node-1"]
    assert BatchNonce.objects.filter(nonce=auth["nonce"]).count() == 1
    refusals = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert refusals == ["health report from 'node-1' rejected: replayed (its nonce was seen)",
                        "health report from 'node-2' rejected: bad signature"]

    old_style = {**stats, "report_seq": 2}
    collector_health("node-1", old_style, sign([json.dumps(old_style, sort_keys=True)]))
    assert CollectorHealth.objects.get().report_seq == 1
    assert "signed over its stats but not its source" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("order", [{"report_epoch": 1.0}, {"report_epoch": -1, "report_seq": 1},
                                   {"report_epoch": 1.0, "report_seq": "2"}])
def test_a_health_report_with_a_malformed_order_is_refused(sign: Signer,
                                                          order: dict[str, object]) -> None:
    stats = {**_stats(), **order}
    collector_health("node-1", stats, sign([health_body("node-1", stats)]))
    assert not CollectorHealth.objects.exists()


@pytest.mark.parametrize("stats", [_stats(dropped_events=-1), _stats(backlog_bytes="lots")])
def test_bad_or_unsigned_health_reports_are_not_stored(sign: Signer,
                                                       stats: dict[str, object]) -> None:
    collector_health("node-1", stats, sign([health_body("node-1", stats)]))
    collector_health("node-1", _stats(), None)
    assert not CollectorHealth.objects.exists()


def test_admin_shows_credentials_by_prefix_and_health(client: Client, sign: Signer,
                                                      credential: CollectorCredential) -> None:
    stats = _stats()
    collector_health("node-1", stats, sign([health_body("node-1", stats)]))
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-1"))
    page = client.get("/admin/ingest/collectorcredential/").content.decode()
    assert credential.name in page and credential.secret not in page
    assert credential.secret[:6] in page
    health = client.get("/admin/ingest/collectorhealth/").content.decode()
    assert "node-1" in health and "2048" in health
    created = client.post("/admin/ingest/collectorcredential/add/",
                          {"name": "node-9", "active": "on"}, follow=True)
    made = CollectorCredential.objects.get(name="node-9")
    assert len(made.secret) == 64 and made.secret in created.content.decode()


def test_a_huge_unsigned_batch_cannot_fill_the_quarantine(sign: Signer) -> None:
    """Anyone who reaches the broker can publish: 2,000 lines of 100 kB without a credential
    leave at most the sample, each a prefix with the line's size and hash (issue 13, 5)."""
    huge = ["x" * 100_000 + str(n) for n in range(2000)]
    result = ingest_batch.apply(args=(huge, "intruder", None)).get()
    assert result == {"stored": 0, "duplicates": 0, "rejected": 2000, "expired": 0}
    rows = list(QuarantinedEvent.objects.order_by("id"))
    assert len(rows) == UNAUTHENTICATED_SAMPLE_LINES
    assert all(len(row.raw) == QUARANTINE_RAW_CHARS for row in rows)
    assert rows[0].raw_bytes == len(huge[0]) == 100_001
    assert rows[0].raw_sha256 == hashlib.sha256(huge[0].encode()).hexdigest()
    assert {row.reason for row in rows} == {"missing auth (unsigned batch)"}
    assert [row.lines for row in rows] == [1] * 9 + [2000 - 9]


def test_an_authentic_batch_keeps_a_prefix_of_each_bad_line(worked_example_lines: list[str],
                                                            sign: Signer) -> None:
    """Signed, but one line is a megabyte of garbage: it is quarantined as a prefix with its
    size and hash; its valid neighbours are stored."""
    garbage = "{" + "a" * 1_000_000
    lines = [*worked_example_lines, garbage]
    result = ingest_batch(lines, "node-1", sign(lines))
    assert result == {"stored": len(worked_example_lines), "duplicates": 0,
                      "rejected": 1, "expired": 0}
    row = QuarantinedEvent.objects.get()
    assert row.raw == garbage[:QUARANTINE_RAW_CHARS] and row.raw_bytes == len(garbage)
    assert row.raw_sha256 == hashlib.sha256(garbage.encode()).hexdigest()


@pytest.mark.parametrize(("builtin", "items"), [
    ("celery.starmap", lambda lines: [[lines, "intruder", None]]),
    ("celery.map", lambda lines: [lines]),
])
def test_a_batch_a_message_asks_a_builtin_to_ingest_is_authenticated(
        worked_example_lines: list[str], builtin: str,
        items: Callable[[list[str]], list[Any]]) -> None:
    """Whoever may publish can ask Celery's ``celery.map`` or ``celery.starmap`` to call
    ``ett.ingest_batch`` on unsigned lines. They call it as a plain function, which Celery
    marks as called directly, as it marks trusted code in this process; run as the worker
    runs a message (``apply``), the batch is refused as unsigned all the same."""
    from ettweb.celery import app

    app.tasks[builtin].apply(args=(ingest_batch.s(), items(worked_example_lines))).get()
    assert Event.objects.count() == 0
    assert _quarantine_reasons() == {"missing auth (unsigned batch)"}
