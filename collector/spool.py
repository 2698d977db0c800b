"""The on-disk spool between a Reporter and the collector agent.

Why it looks like this:

* **Record format**: one record per line, ``<event json>\\t<crc32 of the json, 8 hex>\\n``.
  A line stays a line (``grep``, ``tail -f`` and the offline report still work) and a JSON
  encoder never writes a raw tab, so the last tab cleanly separates the checksum. A line
  without the ``\\t<8 hex>`` suffix is a *plain* JSONL record: hand-written files and spools
  from older Reporters keep working, unverified. ``collector.schema.parse_event`` accepts both.
* **Segments**: a Reporter appends to ``<job>.a<attempt>.r<rank>.<pid>.<rand>.<seq>.jsonl`` and
  rolls to the next ``seq`` at ``segment_bytes``. A segment the writer will never append to
  again is *sealed* by making it read-only (mode 0444): the agent may delete a sealed segment
  once everything in it is shipped, and a sealed segment's unterminated tail is a torn record
  (corruption), while an open segment's tail is a write in progress (wait).
* **Bound**: the writer keeps all ``*.jsonl`` in its directory under ``max_spool_bytes``. What
  does not fit is dropped and counted, never waited for: a trainer must not block on a slow
  or absent agent. Each writer keeps its counts in a ``<segment stem>.dropped`` JSON sidecar,
  which the agent sums and ships as ``dropped_events`` in its health report.
* **fsync**: ``never`` (page cache; survives a trainer crash, not a node crash), ``interval``
  (at most one fsync per ``fsync_interval_s``) or ``always`` (one per written batch).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
import uuid
import zlib
from collections.abc import Generator
from pathlib import Path

SEGMENT_SUFFIX = ".jsonl"
DROPPED_SUFFIX = ".dropped"
FSYNC_POLICIES = ("never", "interval", "always")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_HEX = frozenset(b"0123456789abcdef")
_TAB = 0x09
#: How long a measured directory size is trusted before the writer looks again.
_RESCAN_S = 1.0

Record = tuple[int, str | None, str | None]


class ChecksumError(ValueError):
    """A record whose checksum does not match its payload; ``str`` is the reason."""


# --------------------------------------------------------------------------- record format
def frame(payload: str) -> str:
    """One spool record (without the newline): the payload, a tab and its CRC-32."""
    return f"{payload}\t{zlib.crc32(payload.encode()):08x}"


def _has_checksum(raw: bytes) -> bool:
    return len(raw) > 9 and raw[-9] == _TAB and all(b in _HEX for b in raw[-8:])


def unframe_bytes(raw: bytes) -> bytes:
    """The payload of one record (no newline); plain JSONL passes through unverified.

    Raises ChecksumError when a checksum is present and does not match.
    """
    if not _has_checksum(raw):
        return raw
    payload = raw[:-9]
    if zlib.crc32(payload) != int(raw[-8:], 16):
        raise ChecksumError("checksum mismatch (corrupted spool record)")
    return payload


def unframe(line: str | bytes) -> str | bytes:
    """``unframe_bytes`` for text or bytes, keeping the input's type (used by parse_event)."""
    if isinstance(line, bytes):
        return unframe_bytes(line.rstrip(b"\r\n"))
    text = line.rstrip("\r\n")
    if len(text) > 9 and text[-9] == "\t":
        return unframe_bytes(text.encode()).decode()
    return text


# --------------------------------------------------------------------------- reading
def is_sealed(st: os.stat_result) -> bool:
    """A sealed segment has no write bit: its writer rolled past it or shut down."""
    return not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def read_records(path: str | os.PathLike[str], offset: int = 0, *,
                 final: bool | None = None) -> Generator[Record, None, None]:
    """Yield ``(next_offset, payload, problem)`` for each record from ``offset`` on.

    ``payload`` is the event JSON (checksum removed) and ``problem`` is None for a good
    record; a corrupted record yields ``payload=None`` and a reason, and reading goes on with
    the next line, so one bad record never takes the rest of its segment with it. A blank
    line yields ``(offset, None, None)``. An unterminated tail is a write in progress and
    ends the iteration, unless the file is ``final`` (default: whether it is sealed). Then a
    tail without a checksum is a torn record in a sealed segment (a Reporter frames every
    record) and a plain last line without its newline in any other file (a hand-written
    JSONL file). ``next_offset`` is where to resume after this record.
    """
    with open(path, "rb") as spool:
        sealed = is_sealed(os.fstat(spool.fileno()))
        final = sealed if final is None else final
        spool.seek(offset)
        for raw in spool:
            start, offset = offset, offset + len(raw)
            if raw.endswith(b"\n"):
                yield (offset, *_record(raw.rstrip(b"\r\n"), start))
            elif not final:
                return
            elif sealed and not _has_checksum(raw):
                yield offset, None, f"torn record at byte {start}"
            else:
                yield (offset, *_record(raw.rstrip(b"\r"), start))


def _record(raw: bytes, start: int) -> tuple[str | None, str | None]:
    if not raw.strip():
        return None, None
    try:
        payload = unframe_bytes(raw)
    except ChecksumError as exc:
        return None, f"{exc} at byte {start}"
    return payload.decode("utf-8", errors="replace"), None


def spool_bytes(directory: Path) -> int:
    """Bytes in all segments of ``directory`` (what ``max_spool_bytes`` bounds)."""
    total = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(SEGMENT_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
    return total


def dropped_events(directory: Path) -> int:
    """The sum of every writer's dropped count in ``directory`` (from the sidecars)."""
    total = 0
    for sidecar in directory.glob(f"*{DROPPED_SUFFIX}"):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            total += int(json.loads(sidecar.read_text())["dropped"])
    return total


# --------------------------------------------------------------------------- writing
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

    @property
    def path(self) -> Path:
        return self.directory / f"{self._stream}.{self._seq:05d}{SEGMENT_SUFFIX}"

    @property
    def dropped_path(self) -> Path:
        return self.directory / f"{self._stream}{DROPPED_SUFFIX}"

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
        """Write the owner's drop counts to the sidecar atomically (tmp + rename)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.dropped_path.with_name(self.dropped_path.name + ".tmp")
        tmp.write_text(json.dumps({"dropped": dropped, "invalid": invalid,
                                   "updated": time.time()}))
        os.replace(tmp, self.dropped_path)

    def close(self) -> None:
        """Seal the current segment; the writer is finished."""
        self._seal()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's descriptor without sealing the parent's file."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
