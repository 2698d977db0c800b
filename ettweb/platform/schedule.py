"""Every periodic task ETT runs, in one place: ``celery -A ettweb.celery beat`` reads this.

Settings import :data:`BEAT_SCHEDULE` as ``CELERY_BEAT_SCHEDULE``, so there is exactly one
schedule module and a periodic task added anywhere else would be a review finding.

The weekly report is not a Monday-09:00 crontab entry: subscribers live in different time
zones, so a frequent ``ett.send_due_reports`` creates each week's send records with their own
due time (Monday 09:00 in the subscriber's zone, plus jitter) and sends those that are due,
one at a time with a pause (``ettweb.reports.sending``). A beat that was down on Monday
catches up when it returns instead of skipping the week.
"""

from __future__ import annotations

from typing import Any, Final

BEAT_SCHEDULE: Final[dict[str, dict[str, Any]]] = {
    # Ingestion upkeep: partitions a week ahead, expired nonces pruned, old events dropped.
    "ensure-event-partitions": {"task": "ett.ensure_event_partitions", "schedule": 3600.0},
    "prune-batch-nonces": {"task": "ett.prune_batch_nonces", "schedule": 300.0},
    # Retention: raw events older than ETT_EVENT_RETENTION_DAYS dropped once their chunks
    # are final (rollups, chunks and impacts stay).
    "drop-expired-events": {"task": "ett.drop_expired_events", "schedule": 3600.0,
                            "options": {"expires": 3500.0}},
    # Safety net: refreshes whose task was lost (worker died between commit and publish).
    "refresh-stale-rollups": {"task": "ett.refresh_stale_rollups", "schedule": 60.0},
    # Weekly reports: plan the week's sends, send what is due, mark abandoned claims missed.
    # Expires before the next run so a backlog of these never piles up in the queue.
    "send-due-reports": {"task": "ett.send_due_reports", "schedule": 60.0,
                         "options": {"expires": 55.0}},
    # /metrics: each counter's floor raised to its current total; the scrape shows the floors
    # (a GET never writes), so the counters trail the rollups by up to this period.
    "raise-counter-floors": {"task": "ett.raise_counter_floors", "schedule": 30.0,
                             "options": {"expires": 25.0}},
    # Rollout pages: the standard windows' bootstrap draws computed ahead (ettweb.rollouts.warm).
    "warm-rollout-impacts": {"task": "ett.warm_rollout_impacts", "schedule": 600.0,
                             "options": {"expires": 590.0}},
    # Unrecorded changes (ETT_SPEC §6.3): level shifts in every component's daily lost share,
    # for the fleet and each team, found on complete days (ettweb.changes); a run is seconds.
    "detect-changes": {"task": "ett.detect_changes", "schedule": 3600.0,
                       "options": {"expires": 3500.0}},
}
