"""The agent ships only regular files with one name from its spool (issue 40, item 4f).

The spool is writable by every trainer on the node, and the agent reads with its own
permissions: a symbolic link (or a hard link) to a file the placer cannot read, a 0600 file
here, was shipped and stored. Each such entry is skipped with one warning naming its path.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from collector.ship_state import ShipState
from collector.spool_reader import NotASegment, open_segment, read_records
from collector.tailer import Batch, SpoolTailer

SECRET = '{"v": 1, "secret": "only the agent may read this"}\n'
GOOD = '{"v": 1, "kind": "mark", "job": "j"}\n'


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A 0600 file outside the spool, as the agent's own state or credential would be."""
    path = tmp_path / "private" / "secret.jsonl"
    path.parent.mkdir()
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def shipped(tailer: SpoolTailer) -> list[str]:
    batch = Batch()
    tailer.fill(batch, max_lines=1000, max_bytes=1 << 20)
    return batch.lines


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_links_and_special_files_are_skipped_with_one_warning_each(
        spool: Path, secret: Path, caplog: pytest.LogCaptureFixture) -> None:
    (spool / "real.jsonl").write_text(GOOD)
    (spool / "soft.jsonl").symlink_to(secret)
    os.link(secret, spool / "hard.jsonl")
    os.mkfifo(spool / "pipe.jsonl")  # opening it to read would block the agent for good
    (spool / "dir.jsonl").mkdir()
    tailer = SpoolTailer(spool, ShipState())
    caplog.set_level(logging.WARNING, logger="ett.collector")

    for _ in range(3):  # the agent scans every poll: still one warning per entry
        assert shipped(tailer) in ([GOOD.rstrip("\n")], [])
    assert set(tailer.state.files) == {"real.jsonl"}
    assert not any("only the agent" in line for line in shipped(tailer))
    assert sorted(warnings(caplog)) == sorted([
        f"spool file {spool / 'dir.jsonl'} is not a regular file; not shipped (the agent "
        "ships only regular files with one name)",
        f"spool file {spool / 'hard.jsonl'} is a regular file with 2 hard links (a link to "
        "a file elsewhere); not shipped (the agent ships only regular files with one name)",
        f"spool file {spool / 'pipe.jsonl'} is not a regular file; not shipped (the agent "
        "ships only regular files with one name)",
        f"spool file {spool / 'soft.jsonl'} is a symbolic link; not shipped (the agent "
        "ships only regular files with one name)"])
    assert tailer.backlog_events() == 1  # the real segment's line; nothing of the links


def test_a_segment_swapped_for_a_link_after_the_scan_is_not_read(
        spool: Path, secret: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The listing and the open are two moments: the open itself refuses to follow a link."""
    segment = spool / "j.jsonl"
    segment.write_text(GOOD)
    tailer = SpoolTailer(spool, ShipState())
    assert tailer.scan() == ["j.jsonl"]
    segment.unlink()
    segment.symlink_to(secret)
    caplog.set_level(logging.WARNING, logger="ett.collector")
    batch = Batch()
    tailer._fill_from("j.jsonl", batch, 1000, 1 << 20)
    assert batch.lines == []
    assert warnings(caplog) == [f"spool file {segment} is a symbolic link; not shipped (the "
                                "agent ships only regular files with one name)"]


def test_the_reader_opens_segments_without_following_links(spool: Path, secret: Path) -> None:
    link = spool / "link.jsonl"
    link.symlink_to(secret)
    with pytest.raises(NotASegment, match=r"link\.jsonl is a symbolic link"):
        open_segment(link)
    with pytest.raises(NotASegment, match="is a symbolic link"):
        next(read_records(link, segment_only=True))
    # The offline tools still read the path they are given, a link included.
    assert [payload for _, payload, _ in read_records(link, final=True)] == [SECRET.rstrip()]


def test_a_link_removed_and_replaced_by_a_real_segment_ships(
        spool: Path, secret: Path, caplog: pytest.LogCaptureFixture) -> None:
    (spool / "j.jsonl").symlink_to(secret)
    tailer = SpoolTailer(spool, ShipState())
    assert shipped(tailer) == []
    (spool / "j.jsonl").unlink()
    (spool / "j.jsonl").write_text(GOOD)
    assert shipped(tailer) == [GOOD.rstrip("\n")]
    assert tailer.refused == {}
