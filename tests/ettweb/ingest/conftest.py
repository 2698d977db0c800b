"""Signing helpers for the ingest tests: a real credential, batches signed with collector.auth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from collector.auth import sign_batch
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import CollectorCredential

Signer = Callable[..., dict[str, Any]]


@pytest.fixture
def credential(db: None) -> CollectorCredential:
    return new_credential("node-test")


@pytest.fixture
def sign(credential: CollectorCredential) -> Signer:
    """``sign(lines, **overrides)``: the auth dict the collector would send with ``lines``."""

    def build(lines: list[str], **overrides: Any) -> dict[str, Any]:
        return sign_batch(credential.collector_id, credential.secret, lines, **overrides)

    return build
