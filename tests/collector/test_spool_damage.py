"""Damaged spool records are counted by the events they destroyed, and whatever is intact is
recovered (issue 13, defect 4).

Every test writes records with the real writer (``SegmentWriter``, the Reporter's), damages
bytes on disk the way a bad disk, a crash or a stray tool would, and reads them back with
``read_records``. The reader's contract checked here: one item per *event* — a payload for an
intact record, a problem for a destroyed one — so a consumer that counts problems counts
destroyed events, and ``next_offset`` is always a clean place to resume.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from collector.schema import EventError, parse_event
from collector.spool import frame
from collector.spool_reader import read_records
from collector.spool_writer import SegmentWriter

Damage = Callable[[bytearray, list[int]], None]


def event(i: int) -> str:
    """A realistic payload: compact like ``dump_event``, with a hex id like the Reporter's."""
    return json.dumps({"v": 1, "id": f"{0x5eed0000 + i:016x}-{i}", "job": "j", "attempt": 0,
                       "kind": "span", "phase": "eval", "start": 1000.0 + i,
                       "end": 1001.0 + i}, separators=(",", ":"))


def segment(directory: Path, count: int) -> Path:
    """``count`` records written and sealed by the real writer; the one segment it made."""
    writer = SegmentWriter(directory, "job.a0.r0")
    assert writer.write([event(i) for i in range(count)]) == count
    writer.close()
    (path,) = directory.glob("*.jsonl")
    return path


def starts(data: bytes) -> list[int]:
    """Where each record begins (the writer's layout: one record per line)."""
    return [0] + [i + 1 for i, byte in enumerate(data[:-1]) if byte == 0x0A]


def damaged(path: Path, damage: Damage) -> Path:
    """Apply ``damage`` to the file's bytes, keeping its mode (sealed stays sealed)."""
    mode = path.stat().st_mode
    data = bytearray(path.read_bytes())
    damage(data, starts(bytes(data)))
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    os.chmod(path, mode & 0o777)
    return path


def read(path: Path, offset: int = 0, **kwargs: bool) -> tuple[list[str], list[str]]:
    good, problems = [], []
    for _end, payload, problem in read_records(path, offset, **kwargs):
        if payload is not None:
            good.append(payload)
        if problem is not None:
            problems.append(problem)
    return good, problems


def crc_field(data: bytearray, record_starts: list[int], record: int) -> int:
    """The offset of a record's 8-hex CRC field."""
    line_end = data.index(b"\n", record_starts[record])
    return line_end - 8


# --------------------------------------------------------------------------- the two defects
def test_a_deleted_newline_fuses_two_records_and_both_are_recovered(tmp_path: Path) -> None:
    def fuse(data: bytearray, at: list[int]) -> None:
        del data[at[3] - 1]  # the newline that ends record 2

    path = damaged(segment(tmp_path, 6), fuse)
    assert read(path) == ([event(i) for i in range(6)], [])


@pytest.mark.parametrize("junk", [b"X", b"{", b"\t", b"7", b" ", b"\r", b"\x00"])
def test_an_overwritten_newline_fuses_two_records_and_both_are_recovered(
        tmp_path: Path, junk: bytes) -> None:
    def overwrite(data: bytearray, at: list[int]) -> None:
        data[at[3] - 1] = junk[0]

    path = damaged(segment(tmp_path, 6), overwrite)
    assert read(path) == ([event(i) for i in range(6)], [])


def test_a_fused_line_with_one_damaged_half_counts_one_and_recovers_the_other(
        tmp_path: Path) -> None:
    def fuse_and_flip(data: bytearray, at: list[int]) -> None:
        data[at[2] + 20] ^= 0x01  # inside record 2's payload
        del data[at[3] - 1]

    path = damaged(segment(tmp_path, 6), fuse_and_flip)
    good, problems = read(path)
    assert good == [event(i) for i in (0, 1, 3, 4, 5)]
    assert len(problems) == 1 and "checksum mismatch" in problems[0]


def test_three_records_fused_with_the_middle_one_damaged(tmp_path: Path) -> None:
    def fuse_three(data: bytearray, at: list[int]) -> None:
        data[at[1] + 20] ^= 0x01  # records 0, 1 and 2 on one line, the middle one damaged
        del data[at[2] - 1]  # a later deletion leaves the earlier offsets valid
        data[at[1] - 1] = ord("#")

    path = damaged(segment(tmp_path, 4), fuse_three)
    good, problems = read(path)
    assert good == [event(0), event(2), event(3)] and len(problems) == 1


@pytest.mark.parametrize("position", [0, 3, 7])
@pytest.mark.parametrize("junk", [b"z", b"G", b" ", b"}", b"-"])
def test_a_crc_field_damaged_into_non_hex_is_corrupted_never_plain(
        tmp_path: Path, position: int, junk: bytes) -> None:
    def spoil(data: bytearray, at: list[int]) -> None:
        data[crc_field(data, at, 2) + position] = junk[0]

    path = damaged(segment(tmp_path, 5), spoil)
    good, problems = read(path)
    assert good == [event(i) for i in (0, 1, 3, 4)]
    assert len(problems) == 1 and "corrupted spool record" in problems[0]


def test_a_lone_record_with_a_spoilt_crc_is_corrupted_even_outside_a_segment(
        tmp_path: Path) -> None:
    """A copy under another name is not known to be a segment; the tab still marks a record."""
    path = tmp_path / "copy.jsonl"
    path.write_text(frame(event(0))[:-8] + "zzzzzzzz\n")
    assert read(path) == ([], ["record without a readable checksum (corrupted spool record) "
                               "at byte 0"])
    with pytest.raises(EventError, match="corrupted spool record"):
        parse_event(path.read_text())


# --------------------------------------------------------------------------- other damage
def test_a_flipped_payload_byte_is_one_corrupted_record(tmp_path: Path) -> None:
    def flip(data: bytearray, at: list[int]) -> None:
        data[at[1] + 30] ^= 0x20

    path = damaged(segment(tmp_path, 3), flip)
    good, problems = read(path)
    assert good == [event(0), event(2)]
    assert problems == [f"checksum mismatch (corrupted spool record) at byte "
                        f"{len(frame(event(0))) + 1}"]


@pytest.mark.parametrize("offset_in_record", [1, 13, 25, 40])
def test_a_stray_newline_inside_a_record_is_one_corrupted_record_not_a_plain_line(
        tmp_path: Path, offset_in_record: int) -> None:
    """Offset 25 splits the hex id, so the first half ends in 8 hex digits like a CRC."""
    def split(data: bytearray, at: list[int]) -> None:
        data[at[1] + offset_in_record] = 0x0A

    path = damaged(segment(tmp_path, 3), split)
    good, problems = read(path)
    assert good == [event(0), event(2)] and len(problems) == 1


def test_a_newline_over_the_first_byte_leaves_a_blank_line_and_one_corrupted_record(
        tmp_path: Path) -> None:
    def blank(data: bytearray, at: list[int]) -> None:
        data[at[1]] = 0x0A

    path = damaged(segment(tmp_path, 3), blank)
    items = list(read_records(path))
    assert [payload for _e, payload, _p in items] == [event(0), None, None, event(2)]
    assert [problem is not None for _e, _payload, problem in items] == [
        False, False, True, False]


@pytest.mark.parametrize("junk", [b"X", b"\n", b" ", b"a"])
def test_a_damaged_separator_tab_loses_nothing_when_the_crc_still_verifies(
        tmp_path: Path, junk: bytes) -> None:
    """The CRC covers the payload; the tab only frames it."""
    def spoil_tab(data: bytearray, at: list[int]) -> None:
        data[crc_field(data, at, 1) - 1] = junk[0]

    path = damaged(segment(tmp_path, 3), spoil_tab)
    assert read(path) == ([event(0), event(1), event(2)], [])


def test_a_damaged_separator_and_payload_is_one_corrupted_record(tmp_path: Path) -> None:
    def spoil(data: bytearray, at: list[int]) -> None:
        data[at[1] + 30] ^= 0x20
        data[crc_field(data, at, 1) - 1] = 0x0A

    path = damaged(segment(tmp_path, 3), spoil)
    good, problems = read(path)
    assert good == [event(0), event(2)] and len(problems) == 1


def test_a_crc_digit_changed_into_another_hex_digit_is_one_corrupted_record(
        tmp_path: Path) -> None:
    def spoil(data: bytearray, at: list[int]) -> None:
        pos = crc_field(data, at, 0) + 4
        data[pos] = ord("0") if data[pos] != ord("0") else ord("1")

    path = damaged(segment(tmp_path, 3), spoil)
    good, problems = read(path)
    assert good == [event(1), event(2)]
    assert len(problems) == 1 and "checksum mismatch" in problems[0]


def test_two_adjacent_damaged_records_are_two_corrupted_records(tmp_path: Path) -> None:
    def spoil(data: bytearray, at: list[int]) -> None:
        data[at[1] + 30] ^= 0x20
        data[crc_field(data, at, 2) + 1] = ord("q")

    path = damaged(segment(tmp_path, 4), spoil)
    good, problems = read(path)
    assert good == [event(0), event(3)] and len(problems) == 2


# --------------------------------------------------------------------------- torn tails
@pytest.mark.parametrize("cut", [1, 30, 9, 3])
def test_a_torn_final_record_waits_while_open_and_is_one_corrupted_record_once_sealed(
        tmp_path: Path, cut: int) -> None:
    """``cut`` bytes are lost from the end: mid-CRC (3, 9), mid-payload (30), or only the
    newline (1: the record is complete and verifies, so it is recovered once sealed)."""
    path = segment(tmp_path, 3)
    os.chmod(path, 0o644)
    with open(path, "r+b") as spool:
        spool.truncate(path.stat().st_size - cut)
    assert read(path) == ([event(0), event(1)], [])  # open: a write in progress
    os.chmod(path, 0o444)
    good, problems = read(path)
    if cut == 1:
        assert (good, problems) == ([event(0), event(1), event(2)], [])
    else:
        assert good == [event(0), event(1)]
        assert problems == [f"torn record at byte {2 * (len(frame(event(0))) + 1)}"]


def test_a_newline_lost_at_the_end_of_a_sealed_segment_is_recovered(tmp_path: Path) -> None:
    def spoil_last_newline(data: bytearray, _at: list[int]) -> None:
        data[-1] = ord("#")

    path = damaged(segment(tmp_path, 2), spoil_last_newline)
    assert read(path) == ([event(0), event(1)], [])


# --------------------------------------------------------------------------- plain JSONL
def test_plain_jsonl_still_ships_unverified_including_tab_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "hand-written.jsonl"
    path.write_text(f'{event(0)}\n\n{{"v": 1,\t"id": "t"}}\n{event(1)}\n')
    good, problems = read(path)
    assert good == [event(0), '{"v": 1,\t"id": "t"}', event(1)] and problems == []


def test_plain_lines_mixed_into_a_segment_still_ship(tmp_path: Path) -> None:
    """The format allows framed and plain records mixed freely."""
    path = segment(tmp_path, 2)
    os.chmod(path, 0o644)
    with open(path, "a") as spool:
        spool.write(f"{event(7)}\n{frame(event(8))}\n")
    assert read(path) == ([event(0), event(1), event(7), event(8)], [])


def test_a_renamed_segment_is_still_read_as_framed(tmp_path: Path) -> None:
    """Without the segment name, the framed records in the file give it away."""
    def split_record(data: bytearray, at: list[int]) -> None:
        data[at[1] + 13] = 0x0A

    source = damaged(segment(tmp_path / "spool", 3), split_record)
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(source, copy)
    good, problems = read(copy)
    assert good == [event(0), event(2)] and len(problems) == 1


# --------------------------------------------------------------------------- resuming
def test_every_yielded_offset_is_a_clean_place_to_resume(tmp_path: Path) -> None:
    def many(data: bytearray, at: list[int]) -> None:
        data[at[7] + 30] ^= 0x20
        del data[at[7] - 1]                      # 6 and 7 fused, 7 damaged
        data[crc_field(data, at, 5) + 2] = ord("x")
        data[at[4] - 1] = ord("{")              # 3 and 4 fused by a '{'
        data[at[2] + 13] = 0x0A                 # 2 split in two lines
        data[at[1] - 1] = ord("#")              # 0 and 1 fused

    path = damaged(segment(tmp_path, 10), many)
    items = list(read_records(path))
    good = [payload for _e, payload, _p in items if payload is not None]
    assert good == [event(i) for i in (0, 1, 3, 4, 6, 8, 9)]
    assert sum(problem is not None for _e, _p, problem in items) == 3
    assert items[-1][0] == path.stat().st_size
    for k, (end, _payload, _problem) in enumerate(items):
        assert list(read_records(path, end)) == items[k + 1:], f"resuming after item {k}"


def test_a_long_stretch_of_unverified_lines_is_resolved_in_bounded_pieces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain lines appended to a segment are held until resolved; a bound keeps a big plain
    tail from being held whole, and what straddles a piece's edge is still read right."""
    import collector.spool_reader

    monkeypatch.setattr(collector.spool_reader, "_MAX_RUN_BYTES", 1000)
    path = segment(tmp_path, 1)
    os.chmod(path, 0o644)
    plain = [event(100 + i) for i in range(40)]
    with open(path, "a") as spool:
        spool.write("".join(line + "\n" for line in plain))
        spool.write(frame(event(200)).replace("\t", "\n") + "\n")  # tab became a newline
        spool.write(frame(event(201))[:-3] + "zzz\n")
    items = list(read_records(path))
    assert [p for _e, p, _q in items if p] == [event(0), *plain, event(200)]
    assert [q is not None for _e, _p, q in items].count(True) == 1
    for k, (end, _payload, _problem) in enumerate(items):
        assert list(read_records(path, end)) == items[k + 1:], f"resuming after item {k}"
