"""Tailing the spool into batches: what the collector agent reads next, and what it may delete.

Why it works this way:

* It reads **complete lines only**. A Reporter appends whole lines, but a reader can catch a
  write half done; a trailing line without ``\\n`` is left for the next look.
* It keeps two positions per spool file: how far it has *read* into the batch being built
  (here), and how far is *committed* (``collector.ship_state``). A batch's end offsets
  become the committed ones only once the broker took it.
* It does not validate events: the worker does, and keeps rejected ones aside with a reason.
  It does verify spool checksums (``collector.spool_reader.read_records``): damaged records
  are resynchronised, intact ones (also those fused by a lost newline) ship, and each
  destroyed event is counted once, when the batch around it commits; the rest of the
  segment ships.
* It ships regular files with one name only (``collector.spool.not_a_segment``): a symbolic
  link, a hard link or a FIFO in the group-writable spool is skipped with one warning naming
  it, and files are opened without following links, so nobody can make the agent ship a
  file they could not read themselves.
* A sealed segment is deleted only after its last byte is committed and ``keep_shipped_s``
  has passed; an unsealed one never is, since its writer may still append.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from collector.ship_state import FileCursor, ShipState
from collector.spool import SEGMENT_SUFFIX, is_sealed, not_a_segment
from collector.spool_reader import NotASegment, open_segment, read_records

log = logging.getLogger("ett.collector")


@dataclass
class Batch:
    """Lines on their way to the broker and, per file, the offset just past the last one."""

    lines: list[str] = field(default_factory=list)
    ends: dict[str, FileCursor] = field(default_factory=dict)
    nbytes: int = 0
    opened_at: float | None = None  # monotonic time of the first line
    corrupted: int = 0  # records skipped as corrupt; counted when the batch commits

    def fits(self, size: int, max_lines: int, max_bytes: int) -> bool:
        """Whether one more line of ``size`` bytes may join; an empty batch takes any line,
        so a line longer than ``max_bytes`` ships alone instead of blocking its file."""
        if not self.lines:
            return True
        return len(self.lines) < max_lines and self.nbytes + size <= max_bytes

    def add(self, text: str, size: int) -> None:
        if self.opened_at is None:
            self.opened_at = time.monotonic()
        self.lines.append(text)
        self.nbytes += size

    def is_full(self, max_lines: int, max_bytes: int) -> bool:
        return len(self.lines) >= max_lines or self.nbytes >= max_bytes

    def age(self) -> float:
        return 0.0 if self.opened_at is None else time.monotonic() - self.opened_at


class SpoolTailer:
    """Finds the spool files and reads complete lines beyond each file's read position."""

    def __init__(self, spool_dir: Path, state: ShipState) -> None:
        self.spool_dir = spool_dir
        self.state = state
        self.read: dict[str, FileCursor] = {
            name: FileCursor(cur.offset, cur.inode) for name, cur in state.files.items()}
        #: Entries skipped as not segments, with the reason last warned about: one warning
        #: per entry (scan runs every poll), again only if it changes or comes back.
        self.refused: dict[str, str] = {}

    def scan(self) -> list[str]:
        """The spool files now present, in name order; forgets deleted ones and restarts a
        file that was replaced (new inode) or truncated below its offset."""
        present: dict[str, os.stat_result] = {}
        refused: dict[str, str] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self.spool_dir) as entries:
            for entry in entries:  # scandir: one stat per file
                if entry.name.startswith(".") or not entry.name.endswith(SEGMENT_SUFFIX):
                    continue  # as glob("*.jsonl"): hidden files are not spool segments
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)  # the entry itself, not a target
                    problem = not_a_segment(st)
                    if problem is None:
                        present[entry.name] = st
                    else:
                        refused[entry.name] = problem
        for name, problem in refused.items():
            self._refuse(name, problem)
        self.refused = {name: why for name, why in self.refused.items() if name in refused}
        for name in list(self.state.files):
            if name not in present:
                del self.state.files[name]
                self.read.pop(name, None)
        for name, st in present.items():
            self._check_identity(name, st)
        return sorted(present)

    def _refuse(self, name: str, problem: str) -> None:
        """Warn once that ``name`` is skipped and why (not on every poll)."""
        if self.refused.get(name) != problem:
            log.warning("spool file %s is %s; not shipped (the agent ships only regular "
                        "files with one name)", self.spool_dir / name, problem)
            self.refused[name] = problem

    def _check_identity(self, name: str, st: os.stat_result) -> None:
        committed = self.state.files.get(name)
        if committed is None:
            self.state.files[name] = FileCursor(0, st.st_ino)
        elif committed.inode != st.st_ino or st.st_size < committed.offset:
            log.warning("spool file %s was replaced or truncated; shipping it from the start",
                        name)
            self.state.files[name] = FileCursor(0, st.st_ino)
            self.read.pop(name, None)
        if name not in self.read:
            cur = self.state.files[name]
            self.read[name] = FileCursor(cur.offset, cur.inode)

    def fill(self, batch: Batch, max_lines: int, max_bytes: int) -> None:
        """Add complete lines to ``batch`` until it is full or nothing complete is left."""
        for name in self.scan():
            if batch.is_full(max_lines, max_bytes):
                return
            self._fill_from(name, batch, max_lines, max_bytes)

    def _fill_from(self, name: str, batch: Batch, max_lines: int, max_bytes: int) -> None:
        """Add this file's next records; a destroyed event is skipped and counted, and the
        rest of the segment still ships. The shared reader yields one item per event (one
        problem per destroyed event), so counting problems counts events."""
        cursor = self.read[name]
        records = read_records(self.spool_dir / name, cursor.offset, segment_only=True)
        try:
            for end, payload, problem in records:
                size = end - cursor.offset
                if payload is not None:
                    if not batch.fits(size, max_lines, max_bytes):
                        return
                    batch.add(payload, size)
                elif problem is not None:
                    batch.corrupted += 1
                    log.warning("spool file %s: %s; record skipped and counted", name, problem)
                cursor.offset = end
                batch.ends[name] = FileCursor(end, cursor.inode)
                if batch.is_full(max_lines, max_bytes):
                    return
        except FileNotFoundError:
            return
        except NotASegment as exc:  # swapped for a link since the scan: read nothing of it
            self._refuse(name, str(exc).removeprefix(f"{self.spool_dir / name} is "))
            return
        finally:
            records.close()

    def commit(self, batch: Batch) -> None:
        """The batch is shipped: its end offsets become the committed ones."""
        for name, end in batch.ends.items():
            self.state.files[name] = FileCursor(end.offset, end.inode)

    def retire_shipped(self, keep_s: float) -> int:
        """Delete sealed segments shipped to their end and idle for ``keep_s``; return how
        many. Unsealed files are never deleted: their writer may still append."""
        retired = 0
        for name, cur in list(self.state.files.items()):
            path = self.spool_dir / name
            try:
                st = path.stat()
                if not (is_sealed(st) and cur.offset >= st.st_size
                        and time.time() - st.st_mtime >= keep_s):
                    continue
                path.unlink()
            except FileNotFoundError:
                pass
            self.state.files.pop(name, None)
            self.read.pop(name, None)
            retired += 1
        return retired

    def backlog_events(self) -> int:
        """Records beyond the committed offsets: complete lines (blank ones included), and an
        unterminated tail — a write in progress, or a torn record waiting for its segment to
        be sealed — because that event is on disk, unshipped, and in no other count.

        Lines, not records: this runs every second over the whole backlog, so it counts
        newlines instead of reading records. Damage that removed or added a newline in a
        part not yet read is off by those newlines until the reader reaches it and counts
        the events exactly (shipped or corrupted)."""
        total = 0
        for name, cur in list(self.state.files.items()):
            with contextlib.suppress(OSError), open(open_segment(self.spool_dir / name),
                                                     "rb") as f:
                f.seek(cur.offset)
                last = b"\n"
                while chunk := f.read(1 << 20):
                    total += chunk.count(b"\n")
                    last = chunk[-1:]
                total += last != b"\n"
        return total

    def backlog_bytes(self) -> int:
        """Bytes present in spool files beyond the committed offsets (shipped or not yet)."""
        total = 0
        for name, cur in self.state.files.items():
            with contextlib.suppress(FileNotFoundError):
                total += max(0, (self.spool_dir / name).stat().st_size - cur.offset)
        return total
