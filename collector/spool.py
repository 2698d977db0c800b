"""The on-disk spool between a Reporter and the collector agent: its record format and layout.

This module is the contract both sides share; ``collector.spool_writer`` appends records,
``collector.spool_reader`` reads them back (recovering what damage left intact). Why the
spool looks like this:

* **Record format**: one record per line, ``<event json>\\t<crc32 of the json, 8 hex>\\n``.
  A line stays a line (``grep``, ``tail -f`` and the offline report still work) and a JSON
  encoder never writes a raw tab, so the last tab cleanly separates the checksum. A line
  without a tab is a *plain* JSONL record: hand-written files and spools of Reporters that
  wrote no checksums keep working, unverified. ``collector.schema.parse_event`` accepts
  both. A tab marks a record, so one whose CRC field is damaged is corrupted, never plain
  JSONL.
* **Segments**: a Reporter appends to ``<job>.a<attempt>.r<rank>.<pid>.<rand>.<seq>.jsonl`` and
  rolls to the next ``seq`` at ``segment_bytes``. A segment the writer will never append to
  again is *sealed* by making it read-only (mode 0444): the agent may delete a sealed segment
  once everything in it is shipped, and a sealed segment's unterminated tail is a torn record
  (corruption), while an open segment's tail is a write in progress (wait).
* **Bound**: the writer keeps all ``*.jsonl`` in its directory under ``max_spool_bytes``. What
  does not fit is dropped and counted, never waited for: a trainer must not block on a slow
  or absent agent. Each writer keeps its counts in the name of an empty sidecar,
  ``<stream>.<dropped>-<invalid>.dropped`` (renamed as they change, so a full disk cannot stop
  them), which the agent sums and ships as ``dropped_events`` in its health report.
* **Only real segments**: the agent ships a ``*.jsonl`` only if it is a regular file with one
  name (:func:`not_a_segment`). The spool is writable by every trainer on the node (the
  ``ett`` group), so a symbolic link or a hard link placed there would otherwise make the
  agent, with its own permissions, read and ship a file the placer cannot read (a link to a
  0600 file was shipped and stored, issue 40). A FIFO or device would block or never end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import zlib
from pathlib import Path

SEGMENT_SUFFIX = ".jsonl"
DROPPED_SUFFIX = ".dropped"
#: A sidecar named by its counts (``<stream>.<dropped>-<invalid>.dropped``, empty).
_COUNTED_SIDECAR = re.compile(r"\.(\d+)-(\d+)" + re.escape(DROPPED_SUFFIX) + "$")
#: A tab as an int: ``9 in line`` is a memchr, ``b"\t" in line`` a general search.
_TAB = 0x09
#: A record's frame: a tab and the CRC-32 of the payload in 8 lowercase hex digits.
_CRC_SUFFIX = re.compile(rb"\t[0-9a-f]{8}")


class ChecksumError(ValueError):
    """A record whose checksum does not match its payload; ``str`` is the reason."""


# --------------------------------------------------------------------------- record format
def frame(payload: str) -> str:
    """One spool record (without the newline): the payload, a tab and its CRC-32."""
    return f"{payload}\t{zlib.crc32(payload.encode()):08x}"


def _has_checksum(raw: bytes) -> bool:
    return len(raw) > 9 and _CRC_SUFFIX.fullmatch(raw, len(raw) - 9) is not None


def unframe_bytes(raw: bytes) -> bytes:
    """The payload of one record (no newline); plain JSONL passes through unverified.

    Raises ChecksumError when a checksum is present and does not match, and when the line
    carries a tab but no readable checksum and does not end like a JSON object: a JSON
    encoder never writes a raw tab, so such a line is a record whose CRC field was damaged,
    and passing it on would have it rejected later as "bad JSON" instead of as corruption.
    """
    if not _has_checksum(raw):
        if _TAB in raw and not raw.endswith(b"}"):
            raise ChecksumError("record without a readable checksum (corrupted spool record)")
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
    if "\t" in text:  # a str search for one character is a memchr too
        return unframe_bytes(text.encode()).decode()
    return text


# --------------------------------------------------------------------------- the directory
def is_sealed(st: os.stat_result) -> bool:
    """A sealed segment has no write bit: its writer rolled past it or shut down."""
    return not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def not_a_segment(st: os.stat_result) -> str | None:
    """Why a spool entry (its ``lstat``, or ``fstat`` once opened) must not be shipped, or None.

    Not the owner: trainers write as their own users by design (the shared group), so a
    segment's owner says nothing. What matters is that the bytes are the entry's own: a
    symbolic link points elsewhere, a second hard link means the same file lives elsewhere
    too (a Reporter never links its segments), and anything but a regular file is no segment.
    """
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_nlink > 1:
        return f"a regular file with {st.st_nlink} hard links (a link to a file elsewhere)"
    return None


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
    """The sum of every writer's dropped count in ``directory`` (from the sidecars).

    A writer's sidecar carries its counts in its *name* (an empty file renamed at every
    change), so a full disk cannot stop them: a rename needs no data block. A sidecar with
    content carries them as JSON (``{"dropped", "invalid", "updated"}``), the form Reporters
    that predate named sidecars leave behind.
    """
    total = 0
    for sidecar in directory.glob(f"*{DROPPED_SUFFIX}"):
        counted = _COUNTED_SIDECAR.search(sidecar.name)
        if counted:
            total += int(counted.group(1))
            continue
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            total += int(json.loads(sidecar.read_text())["dropped"])
    return total
