"""``manage.py ett_collector {create,revoke,list}``: collector credentials for batch signing.

``create NAME`` prints the two lines a node needs (``ETT_COLLECTOR_ID=…`` and
``ETT_COLLECTOR_SECRET=…``) in env-file form, so scripts can parse them and operators can
paste them into a systemd ``EnvironmentFile``. The secret is shown in full only here.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import CollectorCredential


class Command(BaseCommand):
    help = "Create, revoke or list collector credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="new credential; prints id and secret once")
        create.add_argument("name")
        revoke = actions.add_parser("revoke", help="refuse batches signed by this collector")
        revoke.add_argument("name")
        actions.add_parser("list", help="names, ids, state (never the secrets)")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['action']}")(options)

    def _create(self, options: dict[str, Any]) -> None:
        name = options["name"].strip()
        if not name or len(name) > 200:
            raise CommandError("NAME must be 1-200 characters")
        try:
            with transaction.atomic():
                credential = new_credential(name)
        except IntegrityError:
            raise CommandError(f"a collector named {name!r} already exists") from None
        self.stdout.write(f"ETT_COLLECTOR_ID={credential.collector_id}")
        self.stdout.write(f"ETT_COLLECTOR_SECRET={credential.secret}")

    def _revoke(self, options: dict[str, Any]) -> None:
        updated = CollectorCredential.objects.filter(name=options["name"]).update(active=False)
        if not updated:
            raise CommandError(f"no collector named {options['name']!r}")
        self.stdout.write(f"revoked {options['name']}")

    def _list(self, options: dict[str, Any]) -> None:
        for credential in CollectorCredential.objects.all():
            state = "active" if credential.active else "revoked"
            self.stdout.write(f"{credential.name}\t{credential.collector_id}\t{state}\t"
                              f"{credential.secret_prefix}")
