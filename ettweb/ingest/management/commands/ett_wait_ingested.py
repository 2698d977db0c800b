"""``manage.py ett_wait_ingested --events N``: wait until N lines have been ingested.

Scripts (the demo, end-to-end tests) need to know when the worker has caught up with what
the collector shipped; counting stored plus quarantined rows answers that without a
result backend. Exits 1 on timeout so a script can tell "slow" from "done".
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ettweb.ingest.models import Event, QuarantinedEvent

POLL_S = 0.5


def ingested() -> tuple[int, int]:
    """(stored events, quarantined lines) right now."""
    return Event.objects.count(), QuarantinedEvent.objects.count()


class Command(BaseCommand):
    help = "Wait until at least --events lines are stored or quarantined."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--events", type=int, required=True,
                            help="lines to wait for (stored + quarantined)")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        target, deadline = options["events"], time.monotonic() + options["timeout"]
        while True:
            stored, quarantined = ingested()
            if stored + quarantined >= target:
                self.stdout.write(f"ingested {stored} events, {quarantined} quarantined")
                return
            if time.monotonic() >= deadline:
                raise CommandError(f"timed out: {stored} stored + {quarantined} quarantined "
                                   f"< {target} lines after {options['timeout']:.0f} s")
            time.sleep(POLL_S)
