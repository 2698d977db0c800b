"""``manage.py ett_warm_impacts``: compute every rollout's impact at the standard windows now.

Why a command: ``/rollouts/`` lists the verdicts the warm pass stored, and beat's first run
comes minutes after it starts; right after a history is imported (``ett_import``,
``simulate_fleet``) the list would say "not computed yet" until then. ``make demo`` calls it
once the simulated fleet is in. The last line on stdout says what it did.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ettweb.rollouts.warm import warm_impacts


class Command(BaseCommand):
    help = ("Compute every rollout's impact at the standard windows and store the verdicts "
            "/rollouts/ lists, as beat's ett.warm_rollout_impacts does every 10 minutes.")

    def handle(self, *args: Any, **options: Any) -> None:
        stats = warm_impacts()
        self.stdout.write(f"computed {stats.impacts} impacts in {stats.seconds:.1f} s "
                          f"({stats.pruned} unused draws pruned)")
