"""File checksums: checkpoints (trainer.checkpoint) and compile-store entries
(trainer.compile_store) prove themselves intact the same way, a size and a CRC-32 per file.

Why CRC-32: it catches truncation and bit rot at memory speed (zlib), and nothing here guards
against a forger. No torch: the supervisor's compile store uses it.
"""

from __future__ import annotations

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
