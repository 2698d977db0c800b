"""``manage.py ett_wait_ingested --events N``: wait until N lines have been ingested and the
rollups of every job are current.

Scripts (the demo, end-to-end tests) need to know when the worker has caught up with what
the collector shipped; counting stored plus quarantined rows answers that without a
result backend, and an empty dirty-job table says every scheduled rollup refresh has run.
``--event-id`` also waits for named events: a count of spooled lines is too low once the
collector has deleted shipped segments, and the demo's Ctrl-C must not stop the worker before
the ``attempt_end`` that ends its job is stored.
Exits 1 on timeout so a script can tell "slow" from "done".
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ettweb.ingest.models import Event, EventId, QuarantinedEvent
from ettweb.queries.base import quarantined_lines
from ettweb.rollups.models import DirtyJob

POLL_S = 0.5


def ingested(job: str | None = None) -> tuple[int, int]:
    """(stored events, quarantined lines) right now, of one job when ``job`` is given.

    Why per job: a database that already holds other events (the demo's simulated fleet,
    16,000 of them) would reach a global count before one new job's events are in.
    """
    events, quarantined = Event.objects.all(), QuarantinedEvent.objects.all()
    if job is not None:
        events, quarantined = events.filter(job=job), quarantined.filter(job=job)
    # Sum of ``lines``: a batch refused whole keeps a sample of rows that count all its lines.
    return events.count(), quarantined_lines(quarantined)


def missing(event_ids: list[str]) -> int:
    """How many of ``event_ids`` are not stored yet."""
    return len(set(event_ids)) - EventId.objects.filter(event_id__in=event_ids).count()


def stale_jobs() -> int:
    """Jobs whose rollups wait for a refresh right now."""
    return DirtyJob.objects.count()


class Command(BaseCommand):
    help = ("Wait until at least --events lines are stored or quarantined and no job's "
            "rollups wait for a refresh.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--events", type=int, required=True,
                            help="lines to wait for (stored + quarantined)")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds")
        parser.add_argument("--job", default=None,
                            help="count only this job's lines (the database may hold others)")
        parser.add_argument("--event-id", action="append", default=[], dest="event_ids",
                            metavar="ID", help="also wait until the event with this id is "
                                               "stored (repeatable)")

    def handle(self, *args: Any, **options: Any) -> None:
        target, deadline = options["events"], time.monotonic() + options["timeout"]
        while True:
            stored, quarantined = ingested(options["job"])
            absent = missing(options["event_ids"])
            waiting = stale_jobs() if stored + quarantined >= target and not absent else None
            if waiting == 0:
                self.stdout.write(f"ingested {stored} events, {quarantined} quarantined; "
                                  "rollups current")
                return
            if time.monotonic() >= deadline:
                raise CommandError(self._timeout_message(stored, quarantined, target, waiting,
                                                         options["timeout"], absent))
            time.sleep(POLL_S)

    @staticmethod
    def _timeout_message(stored: int, quarantined: int, target: int, waiting: int | None,
                         timeout: float, absent: int) -> str:
        if absent and stored + quarantined >= target:
            return (f"timed out: {absent} of the events named by --event-id not stored "
                    f"after {timeout:.0f} s")
        if waiting is None:
            return (f"timed out: {stored} stored + {quarantined} quarantined < {target} lines "
                    f"after {timeout:.0f} s")
        return (f"timed out: all {target} lines are in, but {waiting} job(s) still wait for a "
                f"rollup refresh after {timeout:.0f} s (is a worker consuming the queue?)")
