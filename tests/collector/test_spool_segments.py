"""The spool format and writer: checksummed records, corruption skipped and counted with the
rest of the segment recovered, torn tails told apart from writes in progress, rolling sealed
segments, and a byte bound that drops (and counts) instead of blocking."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collector.schema import EventError, parse_event
from collector.spool import dropped_events, frame, is_sealed, spool_bytes
from collector.spool_reader import read_records
from collector.spool_writer import SegmentWriter


def event(i: int) -> str:
    return json.dumps({"v": 1, "id": f"e{i}", "job": "j", "attempt": 0, "kind": "mark",
                       "mark": "heartbeat", "ts": float(i)})


def write_segment(path: Path, records: list[str]) -> None:
    path.write_text("".join(frame(r) + "\n" for r in records))


def payloads(path: Path, **kwargs: bool) -> tuple[list[str], list[str]]:
    good, problems = [], []
    for _end, payload, problem in read_records(path, **kwargs):
        if payload is not None:
            good.append(payload)
        if problem is not None:
            problems.append(problem)
    return good, problems


def test_records_round_trip_and_parse_as_events(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_segment(path, [event(i) for i in range(3)])
    good, problems = payloads(path)
    assert good == [event(i) for i in range(3)] and problems == []
    assert [parse_event(line)["id"] for line in path.read_text().splitlines()] == [
        "e0", "e1", "e2"]


def test_flipped_byte_is_one_corrupted_record_and_the_rest_is_recovered(
        tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_segment(path, [event(i) for i in range(5)])
    data = bytearray(path.read_bytes())
    middle = data.index(b"e2")
    data[middle] = ord("E")
    path.write_bytes(bytes(data))
    good, problems = payloads(path)
    assert good == [event(i) for i in (0, 1, 3, 4)]
    assert len(problems) == 1 and "checksum mismatch" in problems[0]
    with pytest.raises(EventError, match="checksum mismatch"):
        parse_event(path.read_text().splitlines()[2])


def test_offsets_resume_exactly_where_the_last_record_ended(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_segment(path, [event(i) for i in range(4)])
    ends = [end for end, _p, _q in read_records(path)]
    assert ends[-1] == path.stat().st_size
    resumed = [p for _e, p, _q in read_records(path, ends[1])]
    assert resumed == [event(2), event(3)]


def test_torn_tail_waits_while_open_and_is_corruption_once_sealed(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_segment(path, [event(0)])
    with open(path, "a") as spool:
        spool.write(frame(event(1))[:30])  # a write in progress
    assert payloads(path) == ([event(0)], [])
    os.chmod(path, 0o444)
    good, problems = payloads(path)
    assert good == [event(0)] and len(problems) == 1 and "torn record" in problems[0]


def test_plain_jsonl_and_blank_lines_still_read(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text(f"{event(0)}\n\n{event(1)}")  # no final newline: a hand-written file
    assert payloads(path) == ([event(0)], [])  # open file: the tail may still be written
    assert payloads(path, final=True) == ([event(0), event(1)], [])
    assert [p for _e, p, _q in read_records(path)] == [event(0), None]  # blank keeps its slot


def test_writer_rolls_segments_and_seals_them(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path, "job.a0.r0", segment_bytes=300)
    for i in range(10):
        assert writer.write([event(i)]) == 1
    writer.close()
    segments = sorted(tmp_path.glob("*.jsonl"))
    assert len(segments) > 2
    assert all(is_sealed(p.stat()) for p in segments)
    assert all(p.stat().st_size <= 300 for p in segments)
    read = [p for seg in segments for _e, p, _q in read_records(seg)]
    assert read == [event(i) for i in range(10)]


def test_writer_drops_exactly_what_does_not_fit_and_never_blocks(tmp_path: Path) -> None:
    record_size = len(frame(event(0))) + 1
    bound = record_size * 7 + record_size // 2
    writer = SegmentWriter(tmp_path, "job.a0.r0", max_spool_bytes=bound)
    written = sum(writer.write([event(i) for i in range(k, k + 3)]) for k in range(0, 30, 3))
    assert written == 7 and writer.dropped == 23
    assert spool_bytes(tmp_path) == 7 * record_size <= bound
    writer.record_dropped(writer.dropped, 0)
    assert dropped_events(tmp_path) == 23


def test_writer_rejects_an_unknown_fsync_policy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync must be one of never, interval, always"):
        SegmentWriter(tmp_path, "s", fsync="sometimes")
    for policy in ("never", "interval", "always"):
        writer = SegmentWriter(tmp_path, policy, fsync=policy, fsync_interval_s=0)
        assert writer.write([event(1)]) == 1
        writer.close()


def test_offline_report_reads_segments_and_rejects_the_corrupted_record(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    from collector import Reporter

    reporter = Reporter(job="seg", spool_dir=tmp_path, heartbeat_s=0)
    reporter.attempt_start(gpus=2, ts=1000.0)
    for i in range(10):
        reporter.span("train", 1000.0 + i, 1001.0 + i, step_start=i, step_end=i + 1)
    reporter.attempt_end("completed", ts=1010.0)
    reporter.shutdown()
    (segment,) = tmp_path.glob("*.jsonl")
    lines = segment.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"train"', b'"trian"')  # corrupt the 3rd train span
    os.chmod(segment, 0o644)
    segment.write_bytes(b"\n".join(lines))
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "ettweb.attribution", str(segment)], cwd=repo,
                         capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(out.stdout)
    assert report["rejected"] == [{"line": 4, "reason": "checksum mismatch (corrupted spool "
                                                        "record) at byte "
                                                        f"{sum(len(x) + 1 for x in lines[:3])}"}]
    (job,) = report["jobs"]
    assert job["productive_s"] == 9.0 and job["wall_s"] == 10.0
