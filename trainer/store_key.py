"""The compile store's signing key: who holds it decides what code later jobs run.

Why a key at all: a store entry carries built kernels (``.so`` files on CPU, Triton kernels in
the GPU's mega-cache) that every later job with the same artifact key loads and runs. A
checksum catches damage, not intent: whoever can write the store folder could otherwise put
code into every training job. Entries are therefore signed with HMAC-SHA256 under this key
(``trainer.compile_store``), and an entry that is unsigned, forged or signed with another key
is refused; the job compiles cold and publishes an entry signed with its own key.

Where it comes from, in order: ``ETT_COMPILE_STORE_KEY`` (the key itself), or
``ETT_COMPILE_STORE_KEY_FILE`` (a file whose first line is the key: a mounted secret), else a
key of this user's own, ``~/.config/ett/compile-store.key``, created on first use with mode
0600. The default protects a store on one machine from other users who can write its folder;
jobs on several machines sharing one store need the same key on each, from a secret
(docs/explanation/compile-store.md says how to rotate it). This module imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Final

KEY_ENV: Final = "ETT_COMPILE_STORE_KEY"
KEY_FILE_ENV: Final = "ETT_COMPILE_STORE_KEY_FILE"
DEFAULT_KEY_FILE: Final = Path("~/.config/ett/compile-store.key")
#: Shortest key accepted: 128 bits written as hex (a generated key is 256 bits).
MIN_KEY_CHARS: Final = 32


class StoreKeyError(ValueError):
    """A key setting that cannot be used; the message names the setting."""


def load_key(environ: Mapping[str, str] | None = None,
             default_file: Path | None = None) -> bytes:
    """The store's key from the environment or the key file (see the module docstring)."""
    environ = os.environ if environ is None else environ
    value, path = environ.get(KEY_ENV, "").strip(), environ.get(KEY_FILE_ENV, "").strip()
    if value and path:
        raise StoreKeyError(f"{KEY_ENV} and {KEY_FILE_ENV} are both set; use one")
    if value:
        return _checked(value, KEY_ENV)
    if path:
        return _checked(_first_line(Path(path), KEY_FILE_ENV), KEY_FILE_ENV)
    file = (default_file or DEFAULT_KEY_FILE).expanduser()
    _create(file)
    return _checked(_first_line(file, "the default key file"), str(file))


def _first_line(path: Path, setting: str) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreKeyError(f"{setting} cannot be read: {exc}") from None
    if not lines or not lines[0].strip():
        raise StoreKeyError(f"{setting} cannot be read: empty file {str(path)!r}")
    return lines[0].strip()


def _checked(key: str, setting: str) -> bytes:
    if len(key) < MIN_KEY_CHARS:
        raise StoreKeyError(f"{setting} must be at least {MIN_KEY_CHARS} characters (make one "
                            "with: python -c 'import secrets; print(secrets.token_hex(32))')")
    return key.encode()


def _create(file: Path) -> None:
    """This user's key, written once with mode 0600. It is written whole under a temporary
    name and hard-linked into place, so two jobs starting at once agree on one key and
    neither reads a half-written file."""
    if file.exists():
        return
    file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = file.with_name(f"{file.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):  # another job's key won
            os.link(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
