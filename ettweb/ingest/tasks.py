"""The Celery task the collector sends by name (``ett.ingest_batch``); logic lives in logic.py.

With ``task_acks_late`` a task that *raises* is still acknowledged, so a database outage
would lose batches. Connection errors are therefore retried (with backoff, without limit):
the batch waits in the broker until Postgres is back. Bad data never raises — it is
quarantined by the logic layer — so a retry can only be about the database being away.
After storing, the task refreshes the rollups of the jobs the batch touched (rollups.logic).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from ettweb.ingest.logic import ingest_lines
from ettweb.rollups.logic import refresh_jobs

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
    """Ingest one batch of raw JSONL lines, then refresh the rollups of the jobs it named.

    The refresh runs after the events committed, so running jobs show live numbers; if it
    fails on a connection error the retried batch is all duplicates but still names its jobs.
    Returns ``{"stored", "duplicates", "rejected"}``.
    """
    batch: list[Any] = lines if isinstance(lines, list) else [lines]
    result = ingest_lines(batch, str(source))
    refresh_jobs(result.jobs)
    return result.as_dict()
