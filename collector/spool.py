"""The on-disk spool between a Reporter and the collector agent.

Why it looks like this:

* **Record format**: one record per line, ``<event json>\\t<crc32 of the json, 8 hex>\\n``.
  A line stays a line (``grep``, ``tail -f`` and the offline report still work) and a JSON
  encoder never writes a raw tab, so the last tab cleanly separates the checksum. A line
  without a tab is a *plain* JSONL record: hand-written files and spools from older
  Reporters keep working, unverified. ``collector.schema.parse_event`` accepts both. A tab
  marks a record, so one whose CRC field is damaged is corrupted, never plain JSONL.
* **Damage** is counted per destroyed *event*: the reader resynchronises on CRC fields, so
  records fused by a lost newline or unframed by a damaged tab are recovered when their
  CRC still matches, a record split by a stray newline is one corrupted event, and in a
  Reporter segment (where every line is a record) no fragment passes as plain JSONL.
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
* **fsync**: ``never`` (page cache; survives a trainer crash, not a node crash), ``interval``
  (at most one fsync per ``fsync_interval_s``) or ``always`` (one per written batch).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
import uuid
import zlib
from collections.abc import Generator
from pathlib import Path

SEGMENT_SUFFIX = ".jsonl"
DROPPED_SUFFIX = ".dropped"
#: A sidecar named by its counts (``<stream>.<dropped>-<invalid>.dropped``, empty).
_COUNTED_SIDECAR = re.compile(r"\.(\d+)-(\d+)" + re.escape(DROPPED_SUFFIX) + "$")
FSYNC_POLICIES = ("never", "interval", "always")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: Single bytes as ints: ``9 in line`` is a memchr, ``b"\t" in line`` a general search.
_TAB, _NL, _CR, _BRACE = 0x09, 0x0A, 0x0D, 0x7B
#: A record's frame: a tab and the CRC-32 of the payload in 8 lowercase hex digits.
_CRC_SUFFIX = re.compile(rb"\t[0-9a-f]{8}")
#: A whole framed line, as the writer leaves it (for telling a segment by its content).
_FRAMED_LINE = re.compile(rb"\t[0-9a-f]{8}\r?\n")
_HEX_RUN = re.compile(rb"[0-9a-f]{8,}")
_HEX8 = re.compile(rb"[0-9a-f]{8}")
_HEX_DIGITS = re.compile(rb"[0-9a-f]")
#: What may follow a CRC field: the newline, or the next record itself when it was lost.
_RECORD_NEXT = frozenset(b"\n{")
#: Bytes that continue a JSON number or string after hex digits (not a CRC field's end).
_JSON_GOES_ON = frozenset(b'0123456789abcdefABCDEF,}]".eE+- \t\r')
#: ``SegmentWriter``'s names: ``<job>.a<attempt>.r<rank>.<pid>.<random>.<seq>.jsonl``.
_SEGMENT_NAME = re.compile(r"\.a\d+\.r\d+\.\d+\.[0-9a-f]{8}\.\d{5,}\.jsonl$")
_SNIFF_BYTES = 64 * 1024
#: Bounds on the search for an intact record inside damage (events are a few KiB).
_MAX_RECOVERED_BYTES = 64 * 1024
_MAX_STARTS_TRIED = 8
#: Unverified lines held before they are resolved (a big plain JSONL tail in a segment).
_MAX_RUN_BYTES = 1024 * 1024
#: How long a measured directory size is trusted before the writer looks again.
_RESCAN_S = 1.0

Record = tuple[int, str | None, str | None]  # (next offset, payload, problem)
Item = tuple[int, str | None, str | None]  # (start offset, payload, problem), before ends


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


# --------------------------------------------------------------------------- reading
def is_sealed(st: os.stat_result) -> bool:
    """A sealed segment has no write bit: its writer rolled past it or shut down."""
    return not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def read_records(path: str | os.PathLike[str], offset: int = 0, *,
                 final: bool | None = None) -> Generator[Record, None, None]:
    """Yield ``(next_offset, payload, problem)`` for each *event* from ``offset`` on.

    ``payload`` is the event JSON (checksum removed) and ``problem`` is None for a good
    record; an event whose record was destroyed yields ``payload=None`` and a reason. There
    is one item per event, not per line, so a consumer that counts problems counts destroyed
    events: two records fused by a lost newline are two items (both recovered when their
    CRCs still verify), a record split by a stray newline is one. A blank line yields
    ``(offset, None, None)``. ``next_offset`` is where to resume after the item: always where
    the next item starts, so resuming there reads the rest exactly as one pass would.

    Lines that do not verify are resynchronised (``_resync``): every record whose CRC still
    matches is recovered wherever it starts, and each destroyed one is one problem. In a
    file that holds framed records (a Reporter segment: by its name, by being sealed, or by
    a framed record in its first 64 KiB) every line must be a record, so a damaged one is
    never mistaken for plain JSONL: a line there is plain only if it parses as a JSON object.
    In any other file a line without a tab is plain JSONL, taken unverified (a JSON encoder
    never writes a raw tab, so a tab marks a record).

    An unterminated tail is a write in progress and ends the iteration, unless the file is
    ``final`` (default: whether it is sealed). Then it is read like any other line: in a
    framed file a tail that does not verify is a torn record, in any other file a plain
    last line without its newline (a hand-written JSONL file).
    """
    with open(path, "rb") as spool:
        sealed = is_sealed(os.fstat(spool.fileno()))
        final = sealed if final is None else final
        framed: bool | None = True if sealed else None
        spool.seek(offset)
        run: list[bytes] = []  # consecutive lines that did not verify, with their newlines
        run_at = run_bytes = 0
        crc32, newline = zlib.crc32, _NL  # locals: this loop runs once per record
        for raw in spool:
            start, offset = offset, offset + len(raw)
            if raw[-1] == newline:
                line = raw[:-1]
            elif final:
                line = raw
            else:
                break  # a write in progress
            # The hot path: a record whose CRC matches ("%08x" checks hex and value at once).
            if line[-9:-8] == b"\t" and b"%08x" % crc32(line[:-9]) == line[-8:]:
                if run:
                    yield from _resolve(run, run_at)
                    run = []
                yield offset, line[:-9].decode("utf-8", errors="replace"), None
                continue
            if line and line[-1] == _CR:  # a CRLF line: look again without the CR
                line = line.rstrip(b"\r")
                payload = _verified(line)
                if payload is not None:
                    if run:
                        yield from _resolve(run, run_at)
                        run = []
                    yield offset, payload.decode("utf-8", errors="replace"), None
                    continue
            if framed is None:
                framed = _looks_framed(path, spool.fileno())
            blank = not line or line.isspace()
            if blank or not (framed or _TAB in line):  # blank, or plain JSONL
                if run:
                    yield from _resolve(run, run_at)
                    run = []
                yield offset, None if blank else line.decode("utf-8", errors="replace"), None
                continue
            if not run:
                run_at, run_bytes = start, 0
            elif run_bytes > _MAX_RUN_BYTES:  # resolve what is held; keep the last line,
                yield from _resolve(run[:-1], run_at)  # whose fate may hang on this one
                run_at, run = start - len(run[-1]), run[-1:]
                run_bytes = len(run[0])
            run.append(raw)
            run_bytes += len(raw)
        if run:
            yield from _resolve(run, run_at)


def _verified(line: bytes) -> bytes | None:
    """The payload of a framed line whose CRC matches, else None."""
    if line[-9:-8] == b"\t" and b"%08x" % zlib.crc32(line[:-9]) == line[-8:]:
        return line[:-9]
    return None


def _looks_framed(path: str | os.PathLike[str], fd: int) -> bool:
    """Whether the file holds Reporter records: a segment's name, or a framed record near
    its start (a renamed or copied segment). Asked only once a line fails to verify, so a
    healthy segment never pays for it."""
    if _SEGMENT_NAME.search(os.fspath(path)):
        return True
    try:
        head = os.pread(fd, _SNIFF_BYTES, 0)
    except OSError:
        return False
    return _FRAMED_LINE.search(head) is not None


def _resolve(raws: list[bytes], base: int) -> list[Record]:
    """The items for a run of consecutive lines that did not verify (``raws``, at file
    offset ``base``): plain JSON lines stay plain, the rest is resynchronised.

    A line that parses as a JSON object is a plain record (hand-written, or mixed into a
    segment), unless it ends in a tab (a record that lost its CRC field) or the next line
    starts with 8 hex digits (a record whose tab became a newline: its CRC decides). The
    rest goes to ``_resync`` in stretches.
    """
    items: list[Item] = []
    stretch: list[bytes] = []
    stretch_at = pos = base
    for i, raw in enumerate(raws):
        line = raw.rstrip(b"\r\n")
        orphan_crc_follows = i + 1 < len(raws) and _HEX8.match(raws[i + 1]) is not None
        if not orphan_crc_follows and not line.endswith(b"\t") and _is_json_object(line):
            if stretch:
                items += _resync(b"".join(stretch), stretch_at)
                stretch = []
            items.append((pos, line.decode("utf-8", errors="replace"), None))
        else:
            if not stretch:
                stretch_at = pos
            stretch.append(raw)
        pos += len(raw)
    if stretch:
        items += _resync(b"".join(stretch), stretch_at)
    ends = [start for start, _payload, _problem in items[1:]] + [pos]
    return [(end, payload, problem)
            for end, (_start, payload, problem) in zip(ends, items, strict=True)]


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        return False


def _resync(data: bytes, base: int) -> list[Item]:
    """The items for damaged bytes ``data`` (at file offset ``base``), in order.

    A record is a payload, a separator (a tab), 8 hex digits and a newline. Damage can
    remove or overwrite the newline (two records fuse), overwrite any byte, or write a
    newline into a record (it splits). So every 8-hex window that may end a record
    (``_crc_windows``) is checked against the bytes since the last record end, starting
    there or at a later ``{`` (when the frame before it was lost too): a match is an intact
    record, recovered. A tab-framed window that matches nothing ends one destroyed record;
    any other window that matches nothing is just 8 hex digits inside a payload. Bytes left
    over between records are destroyed records whose frames are gone (``_destroyed``).
    """
    items: list[Item] = []
    cur = 0
    view = memoryview(data)
    for w0, w1, record_end in _crc_windows(data):
        sep = w0 - 1
        if sep < cur:
            continue
        start = _verified_start(data, view, cur, sep, data[w0:w1])
        if start is not None:
            items += _destroyed(data, base, cur, start, torn=False)
            items.append((base + start, view[start:sep].tobytes().decode(
                "utf-8", errors="replace"), None))
        elif record_end and data[sep] == _TAB:
            items += _destroyed(data, base, cur, sep, torn=False, last="checksum mismatch")
        else:
            continue
        cur = min(len(data), w1 if data[w1:w1 + 1] == b"{" else w1 + 1)
    return items + _destroyed(data, base, cur, len(data), torn=not data.endswith(b"\n"))


def _destroyed(data: bytes, base: int, begin: int, end: int, *, torn: bool,
               last: str | None = None) -> list[Item]:
    """One problem per destroyed record in ``data[begin:end]``.

    Without ``last`` (no frame ends the bytes) a single overwritten newline or blanks are
    nothing. Otherwise one record starts at ``begin``, one after each damaged frame in the
    bytes (a tab, a CRC field with at most one digit gone, then the record's newline or the
    next record: a tab is never part of a payload, and the rest keeps a tab written into a
    payload from counting), and one at each line that begins like a record (``{``, for
    records that lost their tab). A record split by a stray newline is still one. A trailing
    one without its newline is a torn write.
    """
    if last is None and len(data[begin:end].strip()) <= 1:
        return []
    starts = {begin}
    for p in _line_starts(data, begin, end):
        if data[p] == _BRACE:
            starts.add(p)
    tab = data.find(b"\t", begin, end)
    while tab != -1:
        after = _after_damaged_frame(data, tab, end)
        if after is not None:
            starts.add(after)
        tab = data.find(b"\t", tab + 1, end)
    reason = last or ("torn record" if torn else "record without a readable checksum")
    ordered = sorted(starts)
    problems = ["record without a readable checksum"] * (len(ordered) - 1) + [reason]
    return [(base + p, None, f"{why} at byte {base + p}" if why == "torn record" else
             f"{why} (corrupted spool record) at byte {base + p}")
            for p, why in zip(ordered, problems, strict=True)]


def _after_damaged_frame(data: bytes, tab: int, end: int) -> int | None:
    """Where the next record starts if the tab at ``tab`` ends a record, else None."""
    field = data[tab + 1:tab + 9]
    if len(field) < 8 or len(_HEX_DIGITS.sub(b"", field)) > 1:
        return None
    after = tab + 9
    if after < end and data[after] == _BRACE:
        return after  # the newline is gone
    if after + 1 < end and (data[after] == _NL or data[after + 1] == _BRACE):
        return after + 1  # the newline, kept or overwritten
    return None


def _line_starts(data: bytes, begin: int, end: int) -> Generator[int, None, None]:
    """``begin`` and every offset after a newline before ``end``."""
    if begin < end:
        yield begin
    newline = data.find(b"\n", begin, end - 1)
    while newline != -1:
        yield newline + 1
        newline = data.find(b"\n", newline + 1, end - 1)


def _crc_windows(data: bytes) -> list[tuple[int, int, bool]]:
    """``(start, end, record_end)`` of each 8-hex window that may be a record's CRC field,
    in order. ``record_end``: the last 8 digits of a hex run followed by a newline, the end
    of the data or the next record's ``{`` — or 8 but one, the last digit being an
    overwritten newline — and exactly 8 digits after a tab followed by a byte that cannot
    go on with a JSON value (the next record's first byte overwritten too; a tab written
    into a payload before a number or string of 8 hex digits is not mistaken for a frame).
    Also the first and the last 8 digits of every run, whatever is around them: only a
    matching CRC makes those a record end (the bytes around the CRC field were damaged)."""
    size = len(data)
    windows: dict[tuple[int, int], bool] = {}
    for run in _HEX_RUN.finditer(data):
        a, b = run.span()
        windows[(a, a + 8)] = windows[(b - 8, b)] = False  # a match alone makes these ends
        if a > 0 and data[a - 1] == _TAB:
            windows[(a, a + 8)] = b - a == 8 and (b == size or data[b] not in _JSON_GOES_ON)
        if b - a >= 9 and (b == size or data[b] == _BRACE):
            windows[(b - 9, b - 1)] = True
        if b == size or data[b] in _RECORD_NEXT or b + 1 == size or data[b + 1] == _BRACE:
            windows[(b - 8, b)] = True
    return [(w0, w1, end) for (w0, w1), end in sorted(windows.items())]


def _verified_start(data: bytes, view: memoryview, cur: int, sep: int,
                    crc: bytes) -> int | None:
    """Where an intact record ending at ``sep`` with CRC ``crc`` starts, if it is intact:
    at ``cur`` (the common case), or at one of the nearest ``{`` before ``sep``."""
    if b"%08x" % zlib.crc32(view[cur:sep]) == crc:
        return cur
    lowest = max(cur + 1, sep - _MAX_RECOVERED_BYTES)
    brace = data.rfind(b"{", lowest, sep)
    for _ in range(_MAX_STARTS_TRIED):
        if brace == -1:
            break
        if b"%08x" % zlib.crc32(view[brace:sep]) == crc:
            return brace
        brace = data.rfind(b"{", lowest, brace)
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
    change), so a full disk cannot stop them: a rename needs no data block. A sidecar of an
    older Reporter carries them as JSON (``{"dropped", "invalid", "updated"}``).
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
        self._sidecar: Path | None = None

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
        file renamed over the sidecar, as before, never reached the agent), but an empty file
        can still be made and renamed: neither needs a data block. A rename is atomic, so the
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
