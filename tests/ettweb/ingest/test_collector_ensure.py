"""``manage.py ett_collector ensure``: the credential automation gives a collector (issue 13,
defect 7). Idempotent; a lost secret file heals by rotation; a revocation or someone else's
id is never overridden. Last, end to end: the file it writes, read by the agent's own
settings parser, signs batches the worker stores."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from collector.auth import sign_batch
from collector.config import config_from_args
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.management.commands import ett_collector
from ettweb.ingest.models import CollectorCredential, Event, QuarantinedEvent
from ettweb.ingest.tasks import ingest_batch

pytestmark = pytest.mark.django_db

NAME = "compose-collector"
ID = "col-compose"


def _ensure(path: Path, name: str = NAME, collector_id: str = ID) -> str:
    """Run the command as compose does; returns what it printed."""
    out = io.StringIO()
    call_command("ett_collector", "ensure", name, "--id", collector_id,
                 "--secret-file", str(path), stdout=out)
    return out.getvalue()


def _stored_secret(name: str = NAME) -> str:
    return CollectorCredential.objects.get(name=name).secret


def _first_line(path: Path) -> str:
    return path.read_text().splitlines()[0]


def test_creates_the_credential_and_writes_its_secret_0600(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "dir" / "collector.secret"
    printed = _ensure(path)
    credential = CollectorCredential.objects.get(name=NAME)
    assert (credential.collector_id, credential.active) == (ID, True)
    assert len(credential.secret) == 64
    assert path.read_text() == f"{credential.secret}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert printed == f"created {NAME} ({ID}): secret in {path}\n"
    assert credential.secret not in printed, "the secret is never printed"
    assert os.listdir(path.parent) == ["collector.secret"], "no temporary file left behind"


def test_a_second_run_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "collector.secret"
    _ensure(path)
    secret, inode = _stored_secret(), path.stat().st_ino
    assert _ensure(path).startswith(f"kept {NAME} ")
    assert _stored_secret() == secret == _first_line(path)
    assert path.stat().st_ino == inode, "the file was not rewritten"
    assert CollectorCredential.objects.count() == 1


@pytest.mark.parametrize("damage", ["missing", "other secret", "empty"])
def test_a_lost_or_wrong_file_rotates_the_secret(tmp_path: Path, damage: str) -> None:
    """A deleted volume must heal on the next `up`: a new secret, stored and written (the
    old one, which may have leaked with the volume, stops working)."""
    path = tmp_path / "collector.secret"
    _ensure(path)
    old = _stored_secret()
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("0" * 64 + "\n" if damage == "other secret" else "")
    assert _ensure(path).startswith(f"rotated {NAME} ")
    new = _stored_secret()
    assert new != old and _first_line(path) == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_revoked_credential_stays_revoked(tmp_path: Path) -> None:
    path = tmp_path / "collector.secret"
    _ensure(path)
    secret = _stored_secret()
    call_command("ett_collector", "revoke", NAME, stdout=io.StringIO())
    path.unlink()
    with pytest.raises(CommandError, match="is revoked; ensure does not undo") as err:
        _ensure(path)
    assert err.value.returncode == 1  # manage.py's exit status
    credential = CollectorCredential.objects.get(name=NAME)
    assert (credential.active, credential.secret) == (False, secret)
    assert not path.exists()


def test_an_id_held_by_another_name_is_refused(tmp_path: Path) -> None:
    new_credential("gpu-node-17", ID)
    path = tmp_path / "collector.secret"
    with pytest.raises(CommandError, match=r"'col-compose' already belongs to 'gpu-node-17'"):
        _ensure(path)
    assert not CollectorCredential.objects.filter(name=NAME).exists()
    assert not path.exists()


def test_an_existing_name_with_another_id_is_refused(tmp_path: Path) -> None:
    new_credential(NAME, "col-elsewhere")
    with pytest.raises(CommandError, match="has id 'col-elsewhere', not 'col-compose'"):
        _ensure(tmp_path / "collector.secret")
    assert CollectorCredential.objects.get(name=NAME).collector_id == "col-elsewhere"


@pytest.mark.parametrize("bad", ["", "col compose", " col-compose", "c" * 65])
def test_a_bad_id_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CommandError, match="--id must be 1-64 characters without whitespace"):
        _ensure(tmp_path / "collector.secret", collector_id=bad)
    assert CollectorCredential.objects.count() == 0


def test_the_longest_id_is_accepted(tmp_path: Path) -> None:
    _ensure(tmp_path / "collector.secret", collector_id="c" * 64)
    assert CollectorCredential.objects.get(name=NAME).collector_id == "c" * 64


def test_a_failed_write_rolls_the_new_secret_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is written inside the transaction: if it cannot be (here the disk is full at
    the rename), the stored secret stays the one the old file holds, not one nobody has."""
    path = tmp_path / "collector.secret"
    _ensure(path)
    old = _stored_secret()
    path.write_text("0" * 64 + "\n")

    def disk_full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ett_collector.os, "replace", disk_full)
    with pytest.raises(CommandError, match=r"cannot be written: .*No space left"):
        _ensure(path)
    assert _stored_secret() == old
    assert os.listdir(tmp_path) == ["collector.secret"], "the temporary file is removed"
    assert _first_line(path) == "0" * 64


def test_an_unreadable_secret_path_is_an_error_not_a_rotation(tmp_path: Path) -> None:
    _ensure(tmp_path / "collector.secret")
    old = _stored_secret()
    with pytest.raises(CommandError, match="cannot be read"):
        _ensure(tmp_path)  # a directory
    assert _stored_secret() == old


def _agent_signs(path: Path, spool: Path, lines: list[str]) -> dict[str, object]:
    """Sign as the agent does: its settings parser reads id and secret file from the
    environment (what compose, systemd and the DaemonSet set), then collector.auth signs."""
    config = config_from_args(
        ["--broker", "redis://127.0.0.1:6379/0", "--spool-dir", str(spool)],
        {"ETT_COLLECTOR_ID": ID, "ETT_COLLECTOR_SECRET_FILE": str(path)})
    assert config.collector_id is not None and config.collector_secret is not None
    return sign_batch(config.collector_id, config.collector_secret, lines)


def test_the_written_file_signs_batches_the_worker_stores(
        tmp_path: Path, worked_example_lines: list[str]) -> None:
    path = tmp_path / "credentials" / "collector.secret"
    _ensure(path)
    lines = worked_example_lines
    auth = _agent_signs(path, tmp_path / "spool", lines)
    # apply(): a delivery as the worker runs it.
    result = ingest_batch.apply(args=(lines, "n", auth)).get()
    assert result == {"stored": len(lines), "duplicates": 0, "rejected": 0, "expired": 0}
    assert Event.objects.count() == len(lines)
    assert not QuarantinedEvent.objects.exists()


def test_after_a_rotation_only_the_new_file_signs(
        tmp_path: Path, worked_example_lines: list[str]) -> None:
    path = tmp_path / "collector.secret"
    _ensure(path)
    old_auth = _agent_signs(path, tmp_path / "spool", worked_example_lines[:2])
    path.unlink()
    _ensure(path)
    rejected = ingest_batch.apply(args=(worked_example_lines[:2], "n", old_auth)).get()
    assert rejected["rejected"] == 2
    assert set(QuarantinedEvent.objects.values_list("reason", flat=True)) == {"bad signature"}
    new_auth = _agent_signs(path, tmp_path / "spool", worked_example_lines)
    stored = ingest_batch.apply(args=(worked_example_lines, "n", new_auth)).get()
    assert stored["stored"] == len(worked_example_lines)
