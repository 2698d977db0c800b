"""Retry options shared by every task that only fails when the database is away.

With ``task_acks_late`` a task that *raises* is still acknowledged, so a database outage
would lose its work. Connection errors are therefore retried with backoff and jitter, without
limit: the message waits in the broker until Postgres is back. Bad data never raises (it is
quarantined), so a retry can only be about the database being away.
"""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError

RETRY_BACKOFF_MAX_S = 300
DATABASE_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError), "retry_backoff": True,
    "retry_backoff_max": RETRY_BACKOFF_MAX_S, "retry_jitter": True, "max_retries": None,
}
