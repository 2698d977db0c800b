"""Change detection's beat task (the logic is ``ettweb.changes.detection``)."""

from __future__ import annotations

from celery import shared_task

from ettweb.changes.detection import detect_changes as run_detection
from ettweb.platform.retry import waits_for_database


@shared_task(name="ett.detect_changes")
@waits_for_database
def detect_changes() -> int:
    """Beat: search every component's daily lost share, for the fleet and each team, and
    replace the stored changes; returns how many were stored."""
    return run_detection().changes
