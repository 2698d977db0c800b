"""Server side of batch authentication: which collector signed a batch, and was it fresh.

The signature format lives in ``collector.auth`` (one module for signer and verifier). Here:
the credential lookup, the clock-skew window and the reasons a rejected batch is quarantined
with. The nonce is *not* claimed here but in the transaction that stores the batch
(:func:`ettweb.ingest.logic.ingest_lines`), so a batch redelivered after a crash is accepted.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from collector.auth import MAX_SKEW_S, constant_time_equal, expected_signature
from ettweb.ingest.logic import Nonce
from ettweb.ingest.models import BatchNonce, CollectorCredential

#: Nonces older than this can no longer be replayed (their timestamp is out of the window).
NONCE_TTL_S = 2 * MAX_SKEW_S


class BatchRejected(Exception):
    """A batch that fails authentication; ``str(exc)`` is the quarantine reason."""


def new_credential(name: str) -> CollectorCredential:
    """Create a collector credential with a random id and a 256-bit secret."""
    return CollectorCredential.objects.create(
        name=name, collector_id=f"col-{secrets.token_hex(8)}", secret=secrets.token_hex(32))


def _credential(collector_id: Any) -> CollectorCredential:
    if not isinstance(collector_id, str) or not collector_id:
        raise BatchRejected("auth field 'collector' must be a non-empty string")
    found = CollectorCredential.objects.filter(collector_id=collector_id).first()
    if found is None:
        raise BatchRejected(f"unknown collector {collector_id[:64]!r}")
    if not found.active:
        raise BatchRejected(f"revoked collector {collector_id[:64]!r}")
    return found


def verify_batch(auth: Any, lines: Sequence[str], now: float | None = None) -> Nonce:
    """Check a batch's ``auth`` against its lines; returns the nonce to claim on store.

    Raises :class:`BatchRejected` naming the problem: missing/malformed auth, unknown or
    revoked collector, bad signature, or a timestamp outside ±MAX_SKEW_S.
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
    if abs(now - float(auth["ts"])) > MAX_SKEW_S:
        raise BatchRejected(f"timestamp outside ±{MAX_SKEW_S} s")
    return Nonce(collector_id=credential.collector_id, value=str(auth["nonce"]), seen_at=now)


def prune_nonces(now: float | None = None) -> int:
    """Forget nonces older than NONCE_TTL_S; returns how many were deleted."""
    cutoff = (time.time() if now is None else now) - NONCE_TTL_S
    deleted, _ = BatchNonce.objects.filter(seen_at__lt=cutoff).delete()
    return deleted
