"""Refused credentials are bounded by construction (issue 40, item 3): whoever can publish to
the broker chooses the sources, and 3,000 unsigned one-line batches with distinct sources once
left 3,000 permanent "rejected" collectors and a 2.5 MB page. Now the per-source rows are
the newest ``ETT_COLLECTOR_REJECTIONS_KEPT`` and none older than
``ETT_COLLECTOR_REJECTIONS_DAYS``, while every refusal stays counted, exactly, per reason."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from collector.auth import sign_batch
from ettweb.access.tokens import issue_token
from ettweb.ingest.credentials import (
    BATCH,
    OTHER_REASONS,
    REASON_KINDS_KEPT,
    prune_rejections,
    reason_kind,
    record_rejection,
)
from ettweb.ingest.models import CollectorRejection, QuarantinedEvent, RejectionTally
from ettweb.ingest.tasks import ingest_batch, prune_batch_nonces
from ettweb.queries import CollectorsQuery, calculate

pytestmark = pytest.mark.django_db
KEPT = 40
FLOOD = 3000
LINE = json.dumps({"v": 1, "kind": "mark", "mark": "x"})


@pytest.fixture
def kept(settings: Any) -> int:
    settings.ETT_COLLECTOR_REJECTIONS_KEPT = KEPT
    settings.ETT_COLLECTOR_REJECTIONS_DAYS = 7
    return KEPT


def _deliver(source: str, auth: object = None) -> None:
    """As the worker runs a delivery from the broker (a plain call would be trusted)."""
    ingest_batch.apply(args=([LINE], source, auth)).get()


@pytest.mark.slow
def test_a_flood_of_unsigned_sources_stays_bounded_and_exactly_counted(
        kept: int, client: Client) -> None:
    for index in range(FLOOD):
        _deliver(f"flood-{index:05d}")
        if index % 500 == 499:
            assert CollectorRejection.objects.count() <= kept
    rows = list(CollectorRejection.objects.order_by("-last_at", "-id"))
    assert len(rows) == kept
    # The newest were kept: the last sources of the flood.
    assert {row.source for row in rows} == {f"flood-{i:05d}" for i in range(FLOOD - kept, FLOOD)}
    (tally,) = RejectionTally.objects.all()
    assert (tally.reason, tally.refusals, tally.sources) == (
        "missing auth (unsigned batch)", FLOOD, FLOOD)
    # Every batch is still quarantined with its line: nothing refused goes uncounted.
    assert QuarantinedEvent.objects.count() == FLOOD

    result = calculate(CollectorsQuery())
    assert (result.rejected_collectors, result.refusals, result.refused_sources,
            result.rejections_kept) == (kept, FLOOD, FLOOD, kept)
    client.force_login(User.objects.create_user("viewer"))
    page = client.get("/collectors/")
    html = page.content.decode()
    print(f"/collectors/ after {FLOOD} refused sources, {kept} kept: {len(page.content):,} B")
    assert page.status_code == 200 and len(page.content) < 150_000, len(page.content)
    assert html.count('class="rejected"') == kept
    assert 'id="refusals-total">3,000<' in html and 'id="refused-sources">3,000<' in html
    token = issue_token(User.objects.create_user("reader"), "bounds test")
    body = client.get("/api/v1/collectors", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert (body["rejected_collectors"], body["refusals"], body["refused_sources"],
            body["rejections_kept"]) == (kept, FLOOD, FLOOD, kept)
    assert body["refusal_reasons"][0]["reason"] == "missing auth (unsigned batch)"
    assert body["refusal_reasons"][0]["refusals"] == FLOOD
    assert len(body["collectors"]) == kept


def test_a_source_refused_again_is_one_row_counted_twice(kept: int) -> None:
    _deliver("node-a")
    _deliver("node-a")
    assert CollectorRejection.objects.get().refusals == 2
    tally = RejectionTally.objects.get()
    assert (tally.refusals, tally.sources) == (2, 1)


def test_made_up_ids_are_one_reason_and_the_kinds_are_capped(kept: int) -> None:
    for index in range(30):
        _deliver("node-x", sign_batch(f"col-made-up-{index}", "0" * 64, [LINE]))
    assert [(t.reason, t.refusals, t.sources) for t in RejectionTally.objects.all()] == [
        ("unknown collector …", 30, 30)]
    assert reason_kind(f"auth field 'ts' must be a number, got {'x' * 900!r}") == (
        "auth field 'ts' must be a number, got …")
    # Reasons the server never words itself still cannot grow the tally past its cap.
    for index in range(REASON_KINDS_KEPT + 20):
        record_rejection(f"odd-{index}", "", f"odd reason {index}", BATCH)
    assert RejectionTally.objects.count() == REASON_KINDS_KEPT
    other = RejectionTally.objects.get(reason=OTHER_REASONS)
    # 62 odd kinds joined "unknown collector …" before the cap; "other" counts the rest.
    assert other.refusals == other.sources == (REASON_KINDS_KEPT + 20) - (REASON_KINDS_KEPT - 2)
    assert sum(t.refusals for t in RejectionTally.objects.all()) == 30 + REASON_KINDS_KEPT + 20


def test_rows_past_their_age_go_at_the_next_refusal_and_by_beat(kept: int) -> None:
    for source in ("old-1", "old-2", "fresh"):
        _deliver(source)
    CollectorRejection.objects.filter(source__startswith="old").update(
        last_at=timezone.now() - timedelta(days=8))
    _deliver("new")  # a new row prunes the aged ones
    assert sorted(CollectorRejection.objects.values_list("source", flat=True)) == [
        "fresh", "new"]
    CollectorRejection.objects.filter(source="fresh").update(
        last_at=timezone.now() - timedelta(days=7, seconds=1))
    assert prune_rejections() == 1
    assert list(CollectorRejection.objects.values_list("source", flat=True)) == ["new"]
    CollectorRejection.objects.update(last_at=timezone.now() - timedelta(days=9))
    prune_batch_nonces.apply().get()  # the beat task prunes them without a new refusal
    assert not CollectorRejection.objects.exists()
    assert RejectionTally.objects.get().refusals == 4  # the counts stay


def test_the_migration_tallies_the_rows_already_kept() -> None:
    """A deployment upgraded with 3,008 rows keeps their counts in the tally."""
    from importlib import import_module

    from django.apps import apps

    migration = import_module("ettweb.ingest.migrations.0010_collector_rejection_bounds")
    now = timezone.now()
    CollectorRejection.objects.bulk_create(
        [CollectorRejection(source=f"s{i}", collector_id="", reason="missing auth (unsigned "
                            "batch)", refused=BATCH, refusals=2, first_at=now, last_at=now)
         for i in range(5)]
        + [CollectorRejection(source="s", collector_id="c", reason="unknown collector 'c'",
                              refused=BATCH, refusals=1, first_at=now, last_at=now)])
    migration.tally_existing(apps, connection.schema_editor())
    assert sorted((t.reason, t.refusals, t.sources) for t in RejectionTally.objects.all()) == [
        ("missing auth (unsigned batch)", 10, 5), ("unknown collector …", 1, 1)]
