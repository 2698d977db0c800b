"""What the collector agent has shipped: committed offsets per spool file, and running totals.

Why it is kept this way: a committed offset moves only after the broker took the batch that
ends there, and the state file is replaced atomically, so a crash or an outage re-ships at
worst the last batch and never loses one. Events carry ids and the worker counts a repeated
id once (ETT_SPEC §2), so at-least-once is enough.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ett.collector")

STATE_VERSION = 1


@dataclass
class FileCursor:
    """A position in one spool file; the inode tells a replaced file from an appended one."""

    offset: int
    inode: int


@dataclass
class ShipState:
    """What has been shipped: committed offsets per spool file and running totals."""

    files: dict[str, FileCursor] = field(default_factory=dict)
    lines: int = 0
    batches: int = 0
    bytes: int = 0
    corrupted: int = 0
    last_success: float | None = None

    @classmethod
    def load(cls, path: Path) -> ShipState:
        """Read the state file; a missing one is a fresh start.

        A corrupt one (written by something else: our writes are atomic) is moved aside and
        shipping starts over — re-shipped events are the same ids, which the worker counts once.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls._from_json(raw)
        except FileNotFoundError:
            return cls()
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            aside = path.with_name(path.name + ".corrupt")
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            log.error("state file %s is unreadable (%s); moved to %s, re-shipping from the start",
                      path, exc, aside)
            return cls()

    @classmethod
    def _from_json(cls, raw: dict[str, Any]) -> ShipState:
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {raw.get('version')!r}")
        files = {name: FileCursor(int(cur["offset"]), int(cur["inode"]))
                 for name, cur in raw["files"].items()}
        totals = raw.get("totals", {})
        last = totals.get("last_success")
        return cls(files, int(totals.get("lines", 0)), int(totals.get("batches", 0)),
                   int(totals.get("bytes", 0)), int(totals.get("corrupted", 0)),
                   None if last is None else float(last))

    def save(self, path: Path) -> None:
        """Write atomically (tmp + fsync + rename + directory fsync): a crash at any moment
        leaves either the old state or the new one, never a torn file."""
        doc = {
            "version": STATE_VERSION,
            "files": {name: {"offset": cur.offset, "inode": cur.inode}
                      for name, cur in sorted(self.files.items())},
            "totals": {"lines": self.lines, "batches": self.batches, "bytes": self.bytes,
                       "corrupted": self.corrupted, "last_success": self.last_success},
            "updated": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as out:
            # dumps without indent: indenting takes the pure-Python encoder, and the state
            # is saved after every batch.
            out.write(json.dumps(doc, separators=(",", ":")))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable; some filesystems refuse to fsync a directory, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
