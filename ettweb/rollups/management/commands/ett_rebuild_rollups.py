"""``manage.py ett_rebuild_rollups``: recompute every rollup from the stored events.

Needed once after upgrading an installation whose events predate rollups, and after any fix
to the attribution rules; ingestion keeps rollups fresh on its own otherwise.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ettweb.rollups.models import ParkedRefresh
from ettweb.rollups.rebuild import rebuild_all


class Command(BaseCommand):
    help = "Recompute every job's rollups from the stored events (one transaction)."

    def handle(self, *args: Any, **options: Any) -> None:
        stats = rebuild_all()
        self.stdout.write(f"rebuilt {stats.jobs} jobs from {stats.events} events: "
                          f"{stats.day_rows_written} day rows in {stats.elapsed_s:.1f} s")
        parked = ParkedRefresh.objects.filter(parked_at__isnull=False).order_by("job")
        for job, error in parked.values_list("job", "error"):
            self.stderr.write(f"parked {job}: {error}")
        if parked:
            self.stderr.write(f"{len(parked)} job(s) parked: fix the cause, then retry them "
                              "(Parked refreshes in the admin)")
