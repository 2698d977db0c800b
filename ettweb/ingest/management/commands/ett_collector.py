"""``manage.py ett_collector {create,ensure,revoke,list}``: collector credentials for signing.

``create NAME`` prints the two lines a node needs (``ETT_COLLECTOR_ID=…`` and
``ETT_COLLECTOR_SECRET=…``) in env-file form, so scripts can parse them and operators can
paste them into a systemd ``EnvironmentFile``. The secret is shown in full only here.

``ensure NAME --id ID --secret-file PATH`` is for automation (the compose stack's
``collector-credential`` service): idempotent, it never prints the secret, only writes it to
PATH where the agent reads it (``ETT_COLLECTOR_SECRET_FILE``). Run it again and nothing
changes; lose the file (a deleted volume) and the next run rotates the secret and writes it,
so the stack heals itself without an operator copying secrets around.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from ettweb.ingest.credentials import new_credential, new_secret
from ettweb.ingest.models import CollectorCredential

#: CollectorCredential.collector_id's max_length; the id travels in every batch's auth.
MAX_ID_CHARS = 64


def _checked_name(raw: str) -> str:
    """The credential's name, stripped; refused when it would not fit the model."""
    name = raw.strip()
    if not name or len(name) > 200:
        raise CommandError("NAME must be 1-200 characters")
    return name


def _checked_id(collector_id: str) -> str:
    """Refuse an id the agent would mangle (it strips whitespace) or the model cannot hold."""
    if (not collector_id or len(collector_id) > MAX_ID_CHARS
            or any(char.isspace() for char in collector_id)):
        raise CommandError(f"--id must be 1-{MAX_ID_CHARS} characters without whitespace, "
                           f"got {collector_id!r}")
    return collector_id


def _secret_on_file(path: Path) -> str | None:
    """The secret PATH holds, read as the agent reads it (first line, stripped).

    None when there is no usable secret there (missing, empty, not text): ``ensure`` then
    writes one. Any other error (a directory, no permission) is the operator's to fix, so it
    stops the command rather than being papered over by a rotation that would fail too.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return None
    except OSError as exc:
        raise CommandError(f"--secret-file {str(path)!r} cannot be read: {exc}") from None
    return lines[0].strip() if lines and lines[0].strip() else None


def write_secret_file(path: Path, secret: str) -> None:
    """Write ``secret`` as PATH's first line, mode 0600, atomically.

    Atomic (a temporary file in the same directory, fsynced, then renamed) because an agent
    may read PATH at any moment: it must see the old secret or the new one, never half a
    line. mkstemp creates the file 0600 whatever the umask, so the secret is never readable
    by others, not even briefly.
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"{secret}\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
    except OSError as exc:
        raise CommandError(f"--secret-file {str(path)!r} cannot be written: {exc}") from None


class Command(BaseCommand):
    help = "Create, ensure, revoke or list collector credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="new credential; prints id and secret once")
        create.add_argument("name")
        ensure = actions.add_parser(
            "ensure", help="idempotent, for automation: create the credential if missing and "
                           "keep its secret in a file (rotated when the file is lost)")
        ensure.add_argument("name")
        ensure.add_argument("--id", required=True, dest="collector_id",
                            help="the collector id (the agent's ETT_COLLECTOR_ID)")
        ensure.add_argument("--secret-file", required=True,
                            help="where the secret is kept (the agent's "
                                 "ETT_COLLECTOR_SECRET_FILE); written mode 0600")
        revoke = actions.add_parser("revoke", help="refuse batches signed by this collector")
        revoke.add_argument("name")
        actions.add_parser("list", help="names, ids, state (never the secrets)")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['action']}")(options)

    def _create(self, options: dict[str, Any]) -> None:
        name = _checked_name(options["name"])
        try:
            with transaction.atomic():
                credential = new_credential(name)
        except IntegrityError:
            raise CommandError(f"a collector named {name!r} already exists") from None
        self.stdout.write(f"ETT_COLLECTOR_ID={credential.collector_id}")
        self.stdout.write(f"ETT_COLLECTOR_SECRET={credential.secret}")

    def _ensure(self, options: dict[str, Any]) -> None:
        """created / kept / rotated, one line; a revoked or mismatched credential is an error.

        The file is written inside the transaction, last: if writing fails the new secret is
        rolled back (the file still holds the old one, the rename never happened); if the
        commit fails after the write, the next run sees the mismatch and rotates again.
        """
        name = _checked_name(options["name"])
        collector_id = _checked_id(options["collector_id"])
        path = Path(options["secret_file"])
        on_file = _secret_on_file(path)
        with transaction.atomic():
            credential = (CollectorCredential.objects.select_for_update()
                          .filter(name=name).first())
            if credential is None:
                outcome = "created"
                credential = self._create_with_id(name, collector_id)
            else:
                self._check_existing(credential, collector_id)
                if on_file is not None and hmac.compare_digest(on_file, credential.secret):
                    outcome = "kept"
                else:
                    outcome = "rotated"
                    credential.secret = new_secret()
                    credential.save(update_fields=["secret"])
            if outcome != "kept":
                write_secret_file(path, credential.secret)
        self.stdout.write(f"{outcome} {name} ({collector_id}): secret in {path}")

    @staticmethod
    def _create_with_id(name: str, collector_id: str) -> CollectorCredential:
        """A new credential with the given id, refused when another name holds the id."""
        holder = CollectorCredential.objects.filter(collector_id=collector_id).first()
        if holder is not None:
            raise CommandError(f"collector id {collector_id!r} already belongs to "
                               f"{holder.name!r}; choose another --id")
        try:
            with transaction.atomic():
                return new_credential(name, collector_id)
        except IntegrityError:
            raise CommandError(f"collector {name!r} or id {collector_id!r} was created "
                               "at the same moment by another run; run again") from None

    @staticmethod
    def _check_existing(credential: CollectorCredential, collector_id: str) -> None:
        """Never resurrect a revoked credential nor change an id agents may already use."""
        if credential.collector_id != collector_id:
            raise CommandError(f"collector {credential.name!r} has id "
                               f"{credential.collector_id!r}, not {collector_id!r}; use that "
                               "--id, or another NAME for a new credential")
        if not credential.active:
            raise CommandError(f"collector {credential.name!r} is revoked; ensure does not "
                               "undo a revocation. Delete it in the admin (Ingest > Collector "
                               "credentials) to have ensure create a fresh one, or use "
                               "another NAME")

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
