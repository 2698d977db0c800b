"""The Celery task the collector sends by name (``ett.ingest_batch``); logic lives in logic.py.

With ``task_acks_late`` a task that *raises* is still acknowledged, so a database outage
would lose batches. Connection errors are therefore retried (with backoff, without limit):
the batch waits in the broker until Postgres is back. Bad data never raises — it is
quarantined by the logic layer — so a retry can only be about the database being away.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from ettweb.ingest.logic import ingest_lines

RETRY_BACKOFF_MAX_S = 300


@shared_task(
    name="ett.ingest_batch",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
    max_retries=None,
)
def ingest_batch(lines: list[str], source: str = "") -> dict[str, int]:
    """Ingest one batch of raw JSONL lines; returns ``{"stored", "duplicates", "rejected"}``."""
    batch: list[Any] = lines if isinstance(lines, list) else [lines]
    return ingest_lines(batch, str(source)).as_dict()
