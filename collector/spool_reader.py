"""Reading spool records back, event by event, recovering every intact record from damage.

Why it is careful: the agent ships what this yields and counts what it cannot, so a damaged
spool must cost exactly the events it destroyed. Damage is counted per destroyed *event*: the
reader resynchronises on CRC fields, so records fused by a lost newline or unframed by a
damaged tab are recovered when their CRC still matches, a record split by a stray newline is
one corrupted event, and in a Reporter segment (where every line is a record) no fragment
passes as plain JSONL. The record format itself is ``collector.spool``'s.
"""

from __future__ import annotations

import errno
import json
import os
import re
import zlib
from collections.abc import Generator

from collector.spool import is_sealed, not_a_segment

#: Single bytes as ints: ``9 in line`` is a memchr, ``b"\t" in line`` a general search.
_TAB, _NL, _CR, _BRACE = 0x09, 0x0A, 0x0D, 0x7B
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

Record = tuple[int, str | None, str | None]  # (next offset, payload, problem)
Item = tuple[int, str | None, str | None]  # (start offset, payload, problem), before ends


class NotASegment(OSError):
    """A spool entry the agent must not read (``collector.spool.not_a_segment``)."""


def open_segment(path: str | os.PathLike[str]) -> int:
    """A descriptor on ``path`` read without following a symbolic link (``O_NOFOLLOW``) or
    blocking on a FIFO (``O_NONBLOCK``), checked again once open: the entry the directory
    listing saw may have been swapped for a link since. NotASegment says why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a symbolic link
            raise NotASegment(f"{os.fspath(path)} is a symbolic link") from None
        raise
    try:
        problem = not_a_segment(os.fstat(fd))
        if problem is not None:
            raise NotASegment(f"{os.fspath(path)} is {problem}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_records(path: str | os.PathLike[str], offset: int = 0, *,
                 final: bool | None = None,
                 segment_only: bool = False) -> Generator[Record, None, None]:
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

    ``segment_only`` (the agent): open it as :func:`open_segment` does, so a link or a
    special file raises :class:`NotASegment` (an ``OSError``) at the first item instead of
    being read; the offline tools read whatever path they are given.
    """
    source: int | str | os.PathLike[str] = open_segment(path) if segment_only else path
    with open(source, "rb") as spool:
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
