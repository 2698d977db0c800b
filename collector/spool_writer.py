"""Appending a Reporter's events to its spool: rolling, sealed segments under a size bound.

Why it is built this way: a trainer must never block on a slow or absent agent, so what
does not fit under ``max_spool_bytes`` is dropped and counted, never waited for, and the
counts travel in the name of an empty sidecar that a full disk cannot stop (the layout is
``collector.spool``'s). ``fsync`` is a policy: ``never`` (page cache; survives a trainer
crash, not a node crash), ``interval`` (at most one fsync per ``fsync_interval_s``) or
``always`` (one per written batch).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

from collector.spool import DROPPED_SUFFIX, SEGMENT_SUFFIX, frame, spool_bytes

FSYNC_POLICIES = ("never", "interval", "always")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: How long a measured directory size is trusted before the writer looks again.
_RESCAN_S = 1.0


class SegmentWriter:
    """Appends framed records to rolling segments in one directory; never blocks on space.

    It writes through a raw descriptor, not a buffered file: a buffered object copied into a
    forked child would flush the parent's pending bytes a second time. Opened lazily, so a
    forked child (which calls :meth:`forget_after_fork`) starts a stream of its own.
    """

    def __init__(self, directory: Path, stem: str, *, fsync: str = "never",
                 fsync_interval_s: float = 1.0, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 max_spool_bytes: int | None = None) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        self.directory = directory
        self._stream = f"{stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        self._fsync, self._fsync_interval_s = fsync, fsync_interval_s
        self._segment_bytes, self._max_spool_bytes = segment_bytes, max_spool_bytes
        self._seq = 0
        self._fd: int | None = None
        self._size = 0
        self._last_fsync = time.monotonic()
        self._used: int | None = None  # bytes in the directory at the last look, plus ours
        self._used_at = 0.0
        self.dropped = 0
        self._sidecar: Path | None = None

    @property
    def stream(self) -> str:
        """This writer's stream: ``<stem>.<pid>.<random>``, the start of its files' names."""
        return self._stream

    @property
    def path(self) -> Path:
        return self.directory / f"{self._stream}.{self._seq:05d}{SEGMENT_SUFFIX}"

    @property
    def dropped_path(self) -> Path | None:
        """The sidecar as last named (None before the first drop was recorded)."""
        return self._sidecar

    def write(self, lines: list[str]) -> int:
        """Append the lines that fit under the bound as one unit; return how many did.

        The rest are counted in :attr:`dropped`. On an OSError the segment is cut back to
        where it was (so a later write cannot glue onto half a record) and it propagates.
        """
        records = [frame(line) + "\n" for line in lines]
        fitting = self._fitting(records)
        self.dropped += len(records) - len(fitting)
        if fitting:
            self._append("".join(fitting).encode())
        return len(fitting)

    def _fitting(self, records: list[str]) -> list[str]:
        if self._max_spool_bytes is None:
            return records
        room = self._max_spool_bytes - self._used_bytes(sum(len(r) for r in records))
        fitting: list[str] = []
        for record in records:
            size = len(record.encode())
            if size > room:
                break
            room -= size
            fitting.append(record)
        return fitting

    def _used_bytes(self, wanted: int) -> int:
        """Directory usage, re-measured when stale or when the batch would not fit (the
        agent may have deleted shipped segments since)."""
        now = time.monotonic()
        stale = self._used is None or now - self._used_at > _RESCAN_S
        if stale or self._used + wanted > (self._max_spool_bytes or 0):  # type: ignore[operator]
            self._used, self._used_at = spool_bytes(self.directory), now
        return self._used or 0

    def _append(self, data: bytes) -> None:
        fd = self._open_for(len(data))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            raise
        self._size += len(data)
        if self._used is not None:
            self._used += len(data)
        self._maybe_fsync(fd)

    def _open_for(self, nbytes: int) -> int:
        if self._fd is not None and self._size and self._size + nbytes > self._segment_bytes:
            self._seal()
            self._seq += 1
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def _maybe_fsync(self, fd: int) -> None:
        now = time.monotonic()
        if self._fsync == "always" or (
                self._fsync == "interval" and now - self._last_fsync >= self._fsync_interval_s):
            os.fsync(fd)
            self._last_fsync = now

    def _seal(self) -> None:
        """Make the segment read-only and close it: the agent may now retire it."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if self._fsync != "never":
                os.fsync(self._fd)
            os.fchmod(self._fd, 0o444)
        os.close(self._fd)
        self._fd = None

    def record_dropped(self, dropped: int, invalid: int) -> None:
        """Name the sidecar after the owner's drop counts: create it empty, or rename it.

        Why a name and not content: on a full disk a file's bytes cannot be written (a temp
        file renamed over the sidecar would never reach the agent), but an empty file can
        still be made and renamed: neither needs a data block. A rename is atomic, so the
        stream always has one sidecar, with the old counts or the new ones.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        named = self.directory / f"{self._stream}.{dropped}-{invalid}{DROPPED_SUFFIX}"
        if self._sidecar is None:
            os.close(os.open(named, os.O_WRONLY | os.O_CREAT, 0o644))
        elif self._sidecar != named:
            os.replace(self._sidecar, named)
        self._sidecar = named

    def close(self) -> None:
        """Seal the current segment; the writer is finished."""
        self._seal()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's descriptor without sealing the parent's file."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._sidecar = None  # the parent's: the child's writer names its own
