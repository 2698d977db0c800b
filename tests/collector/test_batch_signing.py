"""Batch signatures: the contract formula, and every tampering the worker must detect."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from collector.auth import (
    constant_time_equal,
    expected_signature,
    new_nonce,
    sign_batch,
)

LINES = ['{"v": 1, "id": "a"}', '{"v": 1, "id": "b"}']


def test_signature_follows_the_contract_formula() -> None:
    auth = sign_batch("c-1", "s3cret", LINES, ts=1700000000.25, nonce="ab" * 16)
    body = hashlib.sha256("\n".join(LINES).encode()).hexdigest()
    message = f"{1700000000.25!r}\n{'ab' * 16}\n{body}".encode()
    assert auth == {"collector": "c-1", "ts": 1700000000.25, "nonce": "ab" * 16,
                    "sig": hmac.new(b"s3cret", message, hashlib.sha256).hexdigest()}


def test_verifier_recomputes_the_signers_signature() -> None:
    auth = sign_batch("c-1", "s3cret", LINES)
    assert constant_time_equal(expected_signature("s3cret", auth, LINES), str(auth["sig"]))
    assert len(str(auth["nonce"])) == 32 and new_nonce() != new_nonce()


@pytest.mark.parametrize("tamper", ["lines", "secret", "ts", "nonce", "order"])
def test_any_change_breaks_the_signature(tamper: str) -> None:
    auth = sign_batch("c-1", "s3cret", LINES, ts=1000.0, nonce="0" * 32)
    lines, secret = list(LINES), "s3cret"
    if tamper == "lines":
        lines[1] = lines[1].replace("b", "c")
    elif tamper == "secret":
        secret = "other"
    elif tamper == "ts":
        auth["ts"] = 1001.0
    elif tamper == "nonce":
        auth["nonce"] = "1" * 32
    else:
        lines.reverse()
    assert not constant_time_equal(expected_signature(secret, auth, lines), str(auth["sig"]))


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("ts", "1000", "'ts' must be a number"),
    ("ts", True, "'ts' must be a number"),
    ("nonce", "abc", "'nonce' must be 32 hex"),
    ("nonce", "z" * 32, "'nonce' must be 32 hex"),
    ("nonce", None, "'nonce' must be 32 hex"),
])
def test_malformed_auth_fields_are_named(field: str, value: object, reason: str) -> None:
    auth = sign_batch("c-1", "s3cret", LINES)
    auth[field] = value
    with pytest.raises(ValueError, match=reason):
        expected_signature("s3cret", auth, LINES)
