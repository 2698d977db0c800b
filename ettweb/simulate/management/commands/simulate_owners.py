"""``manage.py simulate_owners``: owner teams and owners for the simulated fleet's components.

Why: component pages, ``/components/`` and the weekly report's default subscriptions all
show ownership, and a fresh install has none. ``make demo`` runs this after loading its
fleet. It only adds (``ettweb.simulate.owners``): labels someone set and users that exist are
left alone. The last line on stdout is the summary.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ettweb.simulate.owners import staff_components


class Command(BaseCommand):
    help = ("Give the simulated fleet's components owner teams and some of them owners "
            "(owner-role users with an e-mail address and no password); changes nothing "
            "that exists.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(staff_components().line())
