"""Credential refusals are recorded per source and claimed collector (issue 27, item 7), and a
collector whose newest word was refused shows as rejected on ``/collectors/`` and in
``GET /api/v1/collectors``, with the reason and when, even if no report of it was ever
accepted; an accepted report afterwards makes it a reporting collector again."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from collector.auth import health_body, sign_batch
from ettweb.access.tokens import issue_token
from ettweb.ingest.models import CollectorCredential, CollectorHealth, CollectorRejection
from ettweb.ingest.tasks import collector_health, ingest_batch
from ettweb.queries import CollectorsQuery, calculate
from tests.ettweb.ingest.conftest import Signer

pytestmark = pytest.mark.django_db
STATS = {"backlog_bytes": 0, "backlog_events": 0, "shipped_events": 12, "dropped_events": 0,
         "corrupted_records": 0, "last_success_ts": None, "spool_files": 1}


def _deliver(lines: list[str], source: str, auth: object) -> None:
    """As the worker runs a delivery (a plain call is trusted in-process code)."""
    ingest_batch.apply(args=(lines, source, auth)).get()


def _report(source: str, auth: object, stats: dict[str, object] | None = None) -> None:
    collector_health.apply(args=(source, stats or STATS, auth)).get()


def test_a_refused_batch_is_recorded_per_source_and_claimed_collector(
        worked_example_lines: list[str], sign: Signer, credential: CollectorCredential) -> None:
    bad = {**sign(worked_example_lines), "sig": "0" * 64}
    _deliver(worked_example_lines, "node-1", bad)
    first = CollectorRejection.objects.get()
    assert (first.source, first.collector_id, first.reason, first.refused, first.refusals) == (
        "node-1", credential.collector_id, "bad signature", "batch", 1)
    _deliver(worked_example_lines, "node-1", {**sign(worked_example_lines), "sig": "1" * 64})
    again = CollectorRejection.objects.get()
    assert again.refusals == 2 and again.first_at == first.first_at
    assert again.last_at >= first.last_at
    assert "secret" not in {field.name for field in CollectorRejection._meta.fields}


def test_an_unsigned_or_unreadable_claim_is_kept_without_an_id(
        worked_example_lines: list[str]) -> None:
    _deliver(worked_example_lines, "node-u", None)
    _deliver(worked_example_lines, "node-nul\x00", {"collector": "col\x00x", "ts": 1.0,
                                                   "nonce": "0" * 32, "sig": "0" * 64})
    rows = {row.source: row for row in CollectorRejection.objects.all()}
    assert rows["node-u"].collector_id == "" and rows["node-u"].reason == (
        "missing auth (unsigned batch)")
    assert rows["node-nul\\u0000"].collector_id == ""  # stored as the quarantine stores it
    assert "1-64 printable ASCII" in rows["node-nul\\u0000"].reason


def test_a_revoked_collectors_health_reports_are_recorded(
        sign: Signer, credential: CollectorCredential) -> None:
    call_command("ett_collector", "revoke", credential.name, stdout=io.StringIO())
    _report("node-2", sign([health_body("node-2", STATS)]))
    row = CollectorRejection.objects.get()
    assert (row.source, row.refused, row.reason) == (
        "node-2", "health report", f"revoked collector {credential.collector_id!r}")
    assert not CollectorHealth.objects.exists()


def test_what_is_not_a_credential_problem_is_not_recorded(
        worked_example_lines: list[str], sign: Signer) -> None:
    _deliver(worked_example_lines, "node-3", sign(worked_example_lines))  # accepted
    bad_stats = {**STATS, "dropped_events": -1}
    _report("node-3", sign([health_body("node-3", bad_stats)]), bad_stats)  # malformed stats
    auth = sign([health_body("node-3", STATS)])
    _report("node-3", auth)
    _report("node-3", auth)  # a replay: someone else's doing, not the credential's
    assert not CollectorRejection.objects.exists()
    assert CollectorHealth.objects.get().shipped_events == 12


def test_a_node_never_accepted_shows_as_rejected_with_the_reason(
        worked_example_lines: list[str], credential: CollectorCredential) -> None:
    wrong = sign_batch(credential.collector_id, "0" * 64, worked_example_lines)
    _deliver(worked_example_lines, "node-wrong", wrong)
    (row,) = calculate(CollectorsQuery()).collectors
    assert (row.source, row.status, row.rejected, row.silent) == (
        "node-wrong", "rejected", True, False)
    assert (row.collector_id, row.rejection_reason) == (credential.collector_id, "bad signature")
    assert row.last_rejected is not None and row.last_seen == row.last_rejected
    assert row.shipped_events == 0 and row.rejected_lines == len(worked_example_lines)
    assert calculate(CollectorsQuery()).rejected_collectors == 1


def test_an_accepted_report_after_the_refusal_makes_it_reporting_again(
        worked_example_lines: list[str], sign: Signer, credential: CollectorCredential) -> None:
    _deliver(worked_example_lines, "node-4", None)
    assert calculate(CollectorsQuery()).collectors[0].status == "rejected"
    _report("node-4", sign([health_body("node-4", STATS)]))  # fixed: signed and accepted
    (row,) = calculate(CollectorsQuery()).collectors
    assert (row.status, row.collector_id, row.shipped_events) == (
        "reporting", credential.collector_id, 12)
    # The refusal stays as history, not as the status.
    assert row.rejection_reason == "missing auth (unsigned batch)"
    # A refusal newer than the last accepted report (a revoked credential) turns it back.
    call_command("ett_collector", "revoke", credential.name, stdout=io.StringIO())
    _report("node-4", sign([health_body("node-4", STATS)]))
    (row,) = calculate(CollectorsQuery()).collectors
    assert (row.status, row.rejection_reason) == (
        "rejected", f"revoked collector {credential.collector_id!r}")


def test_rejected_collectors_come_first_and_are_not_counted_silent(
        worked_example_lines: list[str]) -> None:
    CollectorHealth.objects.create(source="node-old")
    CollectorHealth.objects.filter(source="node-old").update(
        updated_at=timezone.now() - timedelta(hours=2))
    _deliver(worked_example_lines, "node-bad", None)
    CollectorRejection.objects.update(last_at=timezone.now() - timedelta(hours=3))
    result = calculate(CollectorsQuery(silent_after_s=300))
    assert [(row.source, row.status) for row in result.collectors] == [
        ("node-bad", "rejected"), ("node-old", "silent")]
    assert (result.rejected_collectors, result.silent) == (1, 1)


@pytest.fixture
def refused(worked_example_lines: list[str], credential: CollectorCredential) -> str:
    CollectorHealth.objects.create(source="node-ok", collector_id=credential.collector_id)
    _deliver(worked_example_lines, "node-<b>bad</b>",
             sign_batch(credential.collector_id, "0" * 64, worked_example_lines))
    return "node-<b>bad</b>"


def test_the_page_flags_the_rejected_collector_with_its_reason(client: Client,
                                                               refused: str) -> None:
    client.force_login(User.objects.create_user("viewer"))
    html = client.get("/collectors/").content.decode()
    assert 'id="collectors-rejected-credentials">1<' in html
    assert html.count('class="rejected"') == 1
    assert "node-&lt;b&gt;bad&lt;/b&gt;" in html and refused not in html
    row = html.split('class="rejected"')[1].split("</tr>")[0]
    assert ">rejected</span>" in row and "bad signature" in row and "last refused" in row
    header, *rows = list(csv.reader(io.StringIO(client.get(
        "/collectors/?format=csv&table=collectors").content.decode())))
    table = [dict(zip(header, row, strict=True)) for row in rows]
    assert [(r["source"], r["status"], r["rejection_reason"]) for r in table] == [
        (refused, "rejected", "bad signature"), ("node-ok", "reporting", "")]
    assert table[0]["last_rejected"] and not table[1]["last_rejected"]


def test_the_api_says_rejected_too(client: Client, refused: str) -> None:
    token = issue_token(User.objects.create_user("reader"), "rejections test")
    body = client.get("/api/v1/collectors", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert body["rejected_collectors"] == 1
    first = body["collectors"][0]
    assert (first["source"], first["status"], first["rejection_reason"]) == (
        refused, "rejected", "bad signature")
    assert first["last_rejected"] is not None
    assert body["collectors"][1]["status"] == "reporting"
    assert body["collectors"][1]["last_rejected"] is None


def test_the_admin_shows_a_rejection_and_may_only_delete_it(client: Client,
                                                           refused: str) -> None:
    """No number is computed from it: deleting a retired node's rejection only takes the node
    off the page; adding or editing one by hand would make the page lie."""
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-1"))
    row = CollectorRejection.objects.get()
    listing = client.get("/admin/ingest/collectorrejection/").content.decode()
    assert "node-&lt;b&gt;bad&lt;/b&gt;" in listing and "bad signature" in listing
    assert client.get("/admin/ingest/collectorrejection/add/").status_code == 403
    assert client.post(f"/admin/ingest/collectorrejection/{row.pk}/change/",
                       {"reason": "fine"}).status_code == 403
    assert CollectorRejection.objects.get().reason == "bad signature"
    deleted = client.post(f"/admin/ingest/collectorrejection/{row.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302 and not CollectorRejection.objects.exists()
    assert [r.source for r in calculate(CollectorsQuery()).collectors] == ["node-ok"]
