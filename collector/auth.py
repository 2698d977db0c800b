"""Batch signing shared by the collector agent (signer) and the ingest worker (verifier).

Why one module: the signature format is a wire contract; if the two sides each
re-implemented it, a one-character drift (``repr`` vs ``str`` of the timestamp,
joining lines with or without a trailing newline) would reject every batch in
production while both sides' unit tests stayed green.

Format::

    body = "\\n".join(lines).encode()
    msg  = f"{ts!r}\\n{nonce}\\n{sha256_hex(body)}"
    sig  = hmac_sha256(secret, msg).hexdigest()
    auth = {"collector": id, "ts": ts, "nonce": 32 hex chars, "sig": sig}

The timestamp and nonce are inside the MAC, so neither can be altered: the nonce lets the
worker recognise a batch it stored before (a redelivery or a replay stores nothing new), and
the timestamp says when the batch was signed. Age is not a reason to refuse an authentic
batch: one that waited in the broker holds events the agent will never send again. This
module imports only the standard library so the agent stays free of Django and torch.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping, Sequence

NONCE_HEX_LEN = 32

#: Where a collector asks the server whether its credential is accepted (``GET``).
CHECK_PATH = "/api/v1/collectors/self"
#: The headers of that check: the same fields as a batch's ``auth``, one header each.
CHECK_HEADERS = {"collector": "X-ETT-Collector", "ts": "X-ETT-Timestamp",
                 "nonce": "X-ETT-Nonce", "sig": "X-ETT-Signature"}

__all__ = [
    "CHECK_HEADERS",
    "CHECK_PATH",
    "NONCE_HEX_LEN",
    "body_digest",
    "check_body",
    "constant_time_equal",
    "expected_signature",
    "health_body",
    "new_nonce",
    "sign_batch",
]


def new_nonce() -> str:
    """Return 32 random hex characters: unique per batch so replays are detectable."""
    return secrets.token_hex(NONCE_HEX_LEN // 2)


def body_digest(lines: Sequence[str]) -> str:
    """SHA-256 hex of the batch body; hashing first keeps the MAC input small."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _message(ts: float, nonce: str, lines: Sequence[str]) -> bytes:
    return f"{ts!r}\n{nonce}\n{body_digest(lines)}".encode()


def _signature(secret: str, ts: float, nonce: str, lines: Sequence[str]) -> str:
    return hmac.new(secret.encode(), _message(ts, nonce, lines), hashlib.sha256).hexdigest()


def sign_batch(
    collector_id: str,
    secret: str,
    lines: Sequence[str],
    ts: float | None = None,
    nonce: str | None = None,
) -> dict[str, object]:
    """Build the ``auth`` dict that travels with ``ett.ingest_batch`` / ``ett.collector_health``.

    ``ts`` and ``nonce`` are injectable so tests can build old or replayed batches
    deterministically; production callers leave them ``None``.
    """
    stamp = float(time.time() if ts is None else ts)
    once = new_nonce() if nonce is None else nonce
    return {
        "collector": collector_id,
        "ts": stamp,
        "nonce": once,
        "sig": _signature(secret, stamp, once, lines),
    }


def expected_signature(secret: str, auth: dict[str, object], lines: Sequence[str]) -> str:
    """Recompute the signature the worker expects for ``auth`` and ``lines``.

    Raises ``ValueError`` naming the field when ``ts`` or ``nonce`` is malformed,
    so the worker can quarantine with a precise reason instead of a KeyError.
    """
    ts = auth.get("ts")
    nonce = auth.get("nonce")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise ValueError(f"auth field 'ts' must be a number, got {ts!r}")
    if not isinstance(nonce, str) or len(nonce) != NONCE_HEX_LEN:
        raise ValueError(f"auth field 'nonce' must be {NONCE_HEX_LEN} hex characters")
    try:
        int(nonce, 16)
    except ValueError:
        raise ValueError(f"auth field 'nonce' must be {NONCE_HEX_LEN} hex characters") from None
    return _signature(secret, float(ts), nonce, lines)


def constant_time_equal(a: str, b: str) -> bool:
    """Compare signatures without leaking the matching prefix length through timing."""
    return hmac.compare_digest(a.encode(), b.encode())


def health_body(source: str, stats: Mapping[str, object]) -> str:
    """The one line a health report is signed over: its ``source`` and its stats, as sorted
    JSON. The source is inside the MAC, so a genuine report cannot be relabelled as another
    collector's; its nonce (recorded by the server) keeps it from being replayed."""
    return json.dumps({"source": source, "stats": dict(stats)}, sort_keys=True)


def check_body(source: str) -> str:
    """The one line a credential check is signed over: the endpoint and the asking node.

    The path sets a check's message apart from a health report's, and the source binds the
    answer to the node that asked."""
    return json.dumps({"check": CHECK_PATH, "source": source}, sort_keys=True)
