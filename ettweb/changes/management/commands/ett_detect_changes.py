"""``manage.py ett_detect_changes``: run change detection now (beat runs it hourly).

Why a command: right after a history is imported (``ett_import``, ``simulate_fleet``) the
changes page would otherwise stay empty until beat's next run; ``make demo`` calls it once
the simulated fleet is in. The last line on stdout says what was found.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ettweb.changes.detection import detect_changes


class Command(BaseCommand):
    help = ("Search every component's daily lost share (fleet and teams) for level shifts and "
            "replace the stored changes, as beat's ett.detect_changes does every hour.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"detected {detect_changes().line()}")
