"""Server side of batch authentication: which collector signed a batch, and is it intact.

The signature format lives in ``collector.auth`` (one module for signer and verifier). Here:
the credential lookup and the reasons a rejected batch is quarantined with. The nonce is *not*
claimed here but in the transaction that stores the batch
(:func:`ettweb.ingest.batches.ingest_lines`), so a batch redelivered after a crash is accepted.

Age is not a reason to refuse. An authentic batch that waited in the broker — workers down
for a redeploy, a backlog, a redelivery after a worker died — holds events the agent has
committed and will never send again; refusing it by the consumer's clock would lose them.
What a stale-timestamp check used to guard against, a replay, is harmless here: a replay of a
batch whose nonce is still kept is recognised and stored as duplicates, and after the nonce
is pruned event ids still deduplicate every event. Integrity and the collector's identity are
what the signature proves, and both are checked.

Every refusal of a batch or health report is also recorded per source and claimed id
(:func:`record_rejection`), because the broker carries nothing back to the node: the
collectors page shows such a node as rejected, and the agent hears the verdict over HTTP
(:func:`answer_check`, ``POST /api/v1/collectors/self``). That check is a request anyone can
make, so it is held to more than a batch: its timestamp must be within ``CHECK_SKEW_S`` of
this clock and its nonce unseen (a replayed answer could tell an agent a revoked credential is
fine), and it writes only what a valid signature proves.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from collector.auth import (
    CHECK_HEADERS,
    check_body,
    constant_time_equal,
    expected_signature,
)
from ettweb.ingest.batches import Nonce, printable
from ettweb.ingest.models import (
    BatchNonce,
    CheckNonce,
    CollectorCredential,
    CollectorRejection,
    RejectionTally,
)

#: Nonces are kept this long (7 days): a replay within it is recognised by its nonce and
#: costs one lookup; an older one is stored again as duplicates (event ids), nothing new.
NONCE_TTL_S = 7 * 86400
#: How far a credential check's timestamp may be from this clock, either way (seconds).
CHECK_SKEW_S = 300.0
#: What a rejection record says was refused.
BATCH, HEALTH_REPORT, CHECK = "batch", "health report", "credential check"


class BatchRejected(Exception):
    """A batch that fails authentication; ``str(exc)`` is the quarantine reason."""


def new_secret() -> str:
    """A fresh 256-bit secret as hex: one generator for new and rotated credentials."""
    return secrets.token_hex(32)


def new_credential(name: str, collector_id: str | None = None) -> CollectorCredential:
    """Create a collector credential with a 256-bit secret and a random id unless given.

    A given id is for automation (``ett_collector ensure``), where the agent's id must be
    known before the credential exists, e.g. written into a compose file.
    """
    return CollectorCredential.objects.create(
        name=name, collector_id=collector_id or f"col-{secrets.token_hex(8)}",
        secret=new_secret())


def _is_id(collector_id: Any) -> bool:
    """Whether ``collector_id`` could be a credential's id: 1-64 printable ASCII characters."""
    return (isinstance(collector_id, str) and 0 < len(collector_id) <= 64
            and collector_id.isascii() and collector_id.isprintable())


def _credential(collector_id: Any, *, active: bool = True) -> CollectorCredential:
    """The credential ``collector_id`` names; a revoked one is refused unless ``active`` is
    False (the caller checks the signature first and refuses it then)."""
    # Checked before the lookup: a NUL or a lone surrogate in it would make Postgres (or the
    # driver's UTF-8 encoder) raise inside the task, which then loses the batch it refuses.
    if not isinstance(collector_id, str) or not collector_id:
        raise BatchRejected("auth field 'collector' must be a non-empty string")
    if not _is_id(collector_id):
        raise BatchRejected("auth field 'collector' must be 1-64 printable ASCII characters")
    found = CollectorCredential.objects.filter(collector_id=collector_id).first()
    if found is None:
        raise BatchRejected(f"unknown collector {collector_id!r}")
    if active and not found.active:
        raise BatchRejected(revoked(found))
    return found


def revoked(credential: CollectorCredential) -> str:
    return f"revoked collector {credential.collector_id!r}"


def verify_batch(auth: Any, lines: Sequence[str], now: float | None = None) -> Nonce:
    """Check a batch's ``auth`` against its lines; returns the nonce to claim on store.

    Raises :class:`BatchRejected` naming the problem: missing/malformed auth, unknown or
    revoked collector, or bad signature. However long ago it was signed, an authentic batch
    is accepted (see the module docstring).
    """
    if not isinstance(auth, dict):
        raise BatchRejected("missing auth (unsigned batch)")
    credential = _credential(auth.get("collector"))
    if not all(isinstance(line, str) for line in lines):
        raise BatchRejected("line must be a string of JSON")
    try:
        expected = expected_signature(credential.secret, auth, lines)
    except ValueError as exc:
        raise BatchRejected(str(exc)) from None
    signature = auth.get("sig")
    if not isinstance(signature, str) or not constant_time_equal(signature, expected):
        raise BatchRejected("bad signature")
    now = time.time() if now is None else now
    return Nonce(collector_id=credential.collector_id, value=str(auth["nonce"]), seen_at=now)


def prune_nonces(now: float | None = None) -> int:
    """Forget batch nonces older than NONCE_TTL_S and check nonces whose timestamp is out of
    the clock window anyway; returns how many were deleted."""
    now = time.time() if now is None else now
    batches, _ = BatchNonce.objects.filter(seen_at__lt=now - NONCE_TTL_S).delete()
    checks, _ = CheckNonce.objects.filter(seen_at__lt=now - 2 * CHECK_SKEW_S).delete()
    return batches + checks


# --------------------------------------------------------------------------- rejections

def claimed_id(auth: Any) -> str:
    """The collector id a refused message claimed, or "" when it claimed none we could keep."""
    claimed = auth.get("collector") if isinstance(auth, dict) else None
    return claimed if isinstance(claimed, str) and _is_id(claimed) else ""


#: Distinct reason kinds the tally keeps; later kinds are counted under :data:`OTHER_REASONS`.
REASON_KINDS_KEPT = 64
OTHER_REASONS = "other reasons (past the first 64 kinds)"
#: Where a reason stops being ours and starts quoting what the sender chose (an id, a value).
_CHOSEN_BY_SENDER = re.compile(r"(unknown collector|revoked collector|, got) .*", re.DOTALL)


def reason_kind(reason: str) -> str:
    """The reason with what the sender chose cut off: the tally's key.

    ``unknown collector 'col-x'`` for a thousand made-up ids is one kind of refusal, not a
    thousand; the per-source rows keep the full reason."""
    return _CHOSEN_BY_SENDER.sub(r"\1 …", printable(reason))[:200]


def record_rejection(source: str, collector_id: str, reason: str, refused: str,
                     at: datetime | None = None) -> None:
    """Keep the latest refusal of ``collector_id``'s credential from ``source``, count it
    in its reason's tally, and keep the per-source rows bounded.

    One upsert, so two workers refusing the same collector at once count both refusals. The
    rows are bounded by construction (the broker's publishers choose the sources): a new row
    prunes all but the newest ``ETT_COLLECTOR_REJECTIONS_KEPT`` and any not refused for
    ``ETT_COLLECTOR_REJECTIONS_DAYS``; the tally (:class:`RejectionTally`) keeps the exact
    totals of what was pruned. The statements run in one transaction (a savepoint inside the
    caller's), so the tally and the rows agree."""
    at = timezone.now() if at is None else at
    table = CollectorRejection._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (source, collector_id, reason, refused, refusals, first_at, "
            "last_at) VALUES (%s, %s, %s, %s, 1, %s, %s) "
            "ON CONFLICT (source, collector_id) DO UPDATE SET reason = EXCLUDED.reason, "
            f"refused = EXCLUDED.refused, refusals = {table}.refusals + 1, "
            f"last_at = greatest({table}.last_at, EXCLUDED.last_at) "
            "RETURNING (xmax = 0)",  # true when this inserted the row, false when it updated
            [printable(source)[:200], collector_id, printable(reason)[:2000], refused, at, at])
        row = cursor.fetchone()
        inserted = bool(row and row[0])
        _tally(cursor, reason_kind(reason), inserted, at)
        if inserted:
            _prune_rejections(cursor, at)


def _tally(cursor: Any, kind: str, new_source: bool, at: datetime) -> None:
    """Count one refusal under ``kind``, or under :data:`OTHER_REASONS` once
    :data:`REASON_KINDS_KEPT` kinds exist (two workers adding the last kinds at once may
    each add one: the bound is the cap plus the workers, never the senders' choice)."""
    table = RejectionTally._meta.db_table
    cursor.execute(
        f"INSERT INTO {table} (reason, refusals, sources, first_at, last_at) "
        f"SELECT CASE WHEN EXISTS (SELECT 1 FROM {table} WHERE reason = %(kind)s) "
        f"OR (SELECT count(*) FROM {table}) < %(cap)s THEN %(kind)s ELSE %(other)s END, "
        "1, %(new)s, %(at)s, %(at)s "
        f"ON CONFLICT (reason) DO UPDATE SET refusals = {table}.refusals + 1, "
        f"sources = {table}.sources + EXCLUDED.sources, "
        f"first_at = least({table}.first_at, EXCLUDED.first_at), "
        f"last_at = greatest({table}.last_at, EXCLUDED.last_at)",
        {"kind": kind, "cap": REASON_KINDS_KEPT - 1, "other": OTHER_REASONS,
         "new": int(new_source), "at": at})


def _prune_rejections(cursor: Any, now: datetime) -> int:
    """Delete the per-source rows past the newest ``ETT_COLLECTOR_REJECTIONS_KEPT`` and those
    not refused for ``ETT_COLLECTOR_REJECTIONS_DAYS``; returns how many went."""
    table = CollectorRejection._meta.db_table
    cutoff = now - timedelta(days=settings.ETT_COLLECTOR_REJECTIONS_DAYS)
    cursor.execute(
        f"DELETE FROM {table} WHERE last_at < %s OR id IN (SELECT id FROM {table} "
        "ORDER BY last_at DESC, id DESC OFFSET %s)",
        [cutoff, settings.ETT_COLLECTOR_REJECTIONS_KEPT])
    return int(cursor.rowcount)


def prune_rejections(now: datetime | None = None) -> int:
    """Beat (with the nonces): drop per-source rejection rows past their age even when no
    new refusal comes to prune them; returns how many were deleted."""
    with connection.cursor() as cursor:
        return _prune_rejections(cursor, timezone.now() if now is None else now)


# --------------------------------------------------------------------------- checks

class CheckRefused(Exception):
    """A credential check not answered with "ok"; ``str(exc)`` is the reason.

    ``rejected``: the server refuses the credential itself (unknown, badly signed, revoked);
    otherwise it could not judge this request (a header missing or malformed, a clock out of
    the window, a replay) and says nothing about the credential.
    """

    def __init__(self, reason: str, *, rejected: bool, status: int = 401) -> None:
        super().__init__(reason)
        self.rejected = rejected
        self.status = status


def _check_auth(headers: Mapping[str, str]) -> dict[str, Any]:
    """The check's ``auth`` fields from its headers, the timestamp as a number; checked
    first, so a request without them is a 401 whatever else it holds."""
    auth: dict[str, Any] = {}
    for field, header in CHECK_HEADERS.items():
        value = headers.get(header)
        if not value:
            raise CheckRefused(f"missing header {header}: a collector signs this check with its "
                               "credential (python -m collector --server-url)", rejected=False)
        auth[field] = value
    try:
        auth["ts"] = float(auth["ts"])
    except ValueError:
        auth["ts"] = math.nan
    if not math.isfinite(auth["ts"]):
        raise CheckRefused(f"header {CHECK_HEADERS['ts']} must be a number (seconds since the "
                           "epoch)", rejected=False)
    return auth


def _verified(auth: dict[str, Any], source: str) -> CollectorCredential:
    """The credential whose secret signed this check, revoked or not."""
    try:
        credential = _credential(auth["collector"], active=False)
    except BatchRejected as exc:
        if not _is_id(auth["collector"]):
            raise CheckRefused(f"header {CHECK_HEADERS['collector']} must be 1-64 printable "
                               "ASCII characters", rejected=False) from None
        raise CheckRefused(str(exc), rejected=True) from None  # unknown collector
    try:
        expected = expected_signature(credential.secret, auth, [check_body(source)])
    except ValueError:  # the nonce: the timestamp was checked above
        raise CheckRefused(f"header {CHECK_HEADERS['nonce']} must be 32 hex characters",
                           rejected=False) from None
    if not constant_time_equal(str(auth["sig"]), expected):
        raise CheckRefused("bad signature", rejected=True)
    return credential


def _claim_check_nonce(nonce: str, now: float) -> bool:
    """Record a check's nonce; False if it was recorded before (a replay)."""
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {CheckNonce._meta.db_table} (nonce, seen_at) VALUES (%s, %s) "
                       "ON CONFLICT (nonce) DO NOTHING RETURNING id", [nonce, now])
        return cursor.fetchone() is not None


def answer_check(headers: Mapping[str, str], source: str,
                 now: float | None = None) -> CollectorCredential:
    """Judge a collector's credential check: the credential it proves, if the server accepts
    it; :class:`CheckRefused` with the reason otherwise.

    Only a valid signature writes: its nonce (kept for the clock window) and, for a revoked
    credential, a rejection of ``source`` (the check proves the node holds that secret).
    Anyone may send the rest, so it is answered and forgotten.
    """
    auth = _check_auth(headers)
    if not 0 < len(source) <= 200 or not source.isprintable():
        raise CheckRefused("source: must be 1-200 printable characters (the collector's "
                           "--source)", rejected=False, status=400)
    credential = _verified(auth, source)
    now = time.time() if now is None else now
    off = auth["ts"] - now
    if abs(off) > CHECK_SKEW_S:
        raise CheckRefused(f"header {CHECK_HEADERS['ts']} is {off:+.0f} s from the server's "
                           f"clock (at most {CHECK_SKEW_S:.0f} s either way): set this node's "
                           "clock (NTP)", rejected=False)
    with transaction.atomic():
        if not _claim_check_nonce(auth["nonce"], now):
            raise CheckRefused("replayed check (its nonce was seen)", rejected=False)
        if not credential.active:
            record_rejection(source, credential.collector_id, revoked(credential), CHECK)
    if not credential.active:
        raise CheckRefused(revoked(credential), rejected=True, status=403)
    return credential
