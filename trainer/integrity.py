"""Files that are whole or absent: checksums and atomic writes.

Checkpoints (trainer.checkpoint) and compile-store entries (trainer.compile_store) prove
themselves intact the same way, a size and a CRC-32 per file; small files that several
processes share (the ISA verdict, the mega-cache, the store's readable keys) are written under
a temporary name and renamed into place, so a reader never sees half of one.

Why CRC-32: it catches truncation and bit rot at memory speed (zlib), and nothing here guards
against a forger. No torch: the supervisor's compile store uses it.
"""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

CHUNK = 1 << 22


def crc32_of(path: Path) -> int:
    """The CRC-32 of the file at ``path``, read a chunk at a time."""
    crc = 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` in one rename (``os.replace`` is atomic on POSIX); the
    temporary name is unique per process and call, so concurrent writers never share one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
