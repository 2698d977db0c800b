"""API tasks: what a request with a token asks the worker to record (the logic is
``ettweb.access.tokens``)."""

from __future__ import annotations

from datetime import datetime

from celery import shared_task

from ettweb.access.tokens import record_use
from ettweb.platform.retry import waits_for_database


@shared_task(name="ett.note_token_used")
@waits_for_database
def note_token_used(token_id: int, at: str) -> bool:
    """Record token ``token_id``'s use at ``at`` (ISO 8601) as its ``last_used``, unless a
    later use is recorded already; whether it changed."""
    return record_use(int(token_id), datetime.fromisoformat(str(at)))
