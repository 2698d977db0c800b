"""Server side of batch authentication: which collector signed a batch, and is it intact.

The signature format lives in ``collector.auth`` (one module for signer and verifier). Here:
the credential lookup and the reasons a rejected batch is quarantined with. The nonce is *not*
claimed here but in the transaction that stores the batch
(:func:`ettweb.ingest.logic.ingest_lines`), so a batch redelivered after a crash is accepted.

Age is not a reason to refuse. An authentic batch that waited in the broker — workers down
for a redeploy, a backlog, a redelivery after a worker died — holds events the agent has
committed and will never send again; refusing it by the consumer's clock would lose them.
What a stale-timestamp check used to guard against, a replay, is harmless here: a replay of a
batch whose nonce is still kept is recognised and stored as duplicates, and after the nonce
is pruned event ids still deduplicate every event. Integrity and the collector's identity are
what the signature proves, and both are checked.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from collector.auth import constant_time_equal, expected_signature
from ettweb.ingest.logic import Nonce
from ettweb.ingest.models import BatchNonce, CollectorCredential

#: Nonces are kept this long (7 days): a replay within it is recognised by its nonce and
#: costs one lookup; an older one is stored again as duplicates (event ids), nothing new.
NONCE_TTL_S = 7 * 86400


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


def _credential(collector_id: Any) -> CollectorCredential:
    # Checked before the lookup: a NUL or a lone surrogate in it would make Postgres (or the
    # driver's UTF-8 encoder) raise inside the task, which then loses the batch it refuses.
    if not isinstance(collector_id, str) or not collector_id:
        raise BatchRejected("auth field 'collector' must be a non-empty string")
    if len(collector_id) > 64 or not (collector_id.isascii() and collector_id.isprintable()):
        raise BatchRejected("auth field 'collector' must be 1-64 printable ASCII characters")
    found = CollectorCredential.objects.filter(collector_id=collector_id).first()
    if found is None:
        raise BatchRejected(f"unknown collector {collector_id[:64]!r}")
    if not found.active:
        raise BatchRejected(f"revoked collector {collector_id[:64]!r}")
    return found


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
    """Forget nonces older than NONCE_TTL_S; returns how many were deleted."""
    cutoff = (time.time() if now is None else now) - NONCE_TTL_S
    deleted, _ = BatchNonce.objects.filter(seen_at__lt=cutoff).delete()
    return deleted
