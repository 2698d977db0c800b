"""The collector's books balance: every event a Reporter emitted is in exactly one of shipped,
backlog, dropped or corrupted — also when spool records are damaged (issue 13, defect 4).

The agent runs its real reading and shipping path against an in-memory publisher (no broker),
over segments the real Reporter wrote and that are then damaged on disk. Random damage is
checked at the reader, whose one-item-per-event contract the agent's counts rest on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector import Reporter
from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.health import HealthStats
from collector.schema import dump_event, parse_event
from collector.spool import dropped_events
from collector.spool_reader import read_records
from collector.spool_writer import SegmentWriter
from tests.examples import examples

EMITTED = 400


@dataclass
class MemoryPublisher:
    """Keeps what it is sent; from batch ``fail_from`` on it refuses and stops the agent
    (an outage that outlasts a ``--once`` run)."""

    fail_from: int | None = None
    agent: Agent | None = None
    batches: list[list[str]] = field(default_factory=list)
    health: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, lines: list[str]) -> None:
        if self.fail_from is not None and len(self.batches) >= self.fail_from:
            assert self.agent is not None
            self.agent.stop()
            raise ConnectionError("broker unreachable")
        self.batches.append(list(lines))

    def publish_health(self, stats: dict[str, Any]) -> None:
        self.health.append(stats)

    def reset(self) -> None:
        """Nothing to redial."""

    def close(self) -> None:
        """Nothing to close."""

    def ids(self) -> list[str]:
        return [parse_event(line)["id"] for batch in self.batches for line in batch]


def run_agent(spool: Path, publisher: MemoryPublisher) -> tuple[int, HealthStats]:
    config = AgentConfig(broker_url="redis://unused", spool_dir=spool,
                         state_file=spool / STATE_FILE_NAME, source="node-books",
                         batch_lines=50, once=True, keep_shipped_s=0.0,
                         retry_initial_s=0.01, retry_max_s=0.01)
    agent = Agent(config, publisher=publisher)
    publisher.agent = agent
    status = agent.run()
    return status, agent.health


def books(health: HealthStats) -> int:
    return (health.shipped_events + health.backlog_events + health.dropped_events
            + health.corrupted_records)


def emit_into(spool: Path) -> Reporter:
    """EMITTED spans through the real Reporter: small segments (a segment rolls between
    writes), and a spool bound that makes it drop (and count) the last of them."""
    reporter = Reporter(job="books", spool_dir=spool, heartbeat_s=0, segment_bytes=4096,
                        max_spool_bytes=72 * 1024)
    for i in range(EMITTED):
        assert reporter.span("eval", float(i), float(i) + 0.5, step_start=i, step_end=i + 1)
        if i % 10 == 9:
            assert reporter.flush()  # one write per 10 events: segments roll between writes
    assert reporter.shutdown()
    assert 0 < reporter.dropped_full < EMITTED // 2 and reporter.dropped_invalid == 0
    return reporter


def segments(spool: Path) -> list[Path]:
    found = sorted(spool.glob("*.jsonl"))
    assert len(found) >= 8
    return found


def records(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def rewrite(path: Path, lines: list[bytes]) -> None:
    """Replace a sealed segment's bytes and seal it again."""
    os.chmod(path, 0o644)
    path.write_bytes(b"".join(lines))
    os.chmod(path, 0o444)


def event_id(line: bytes) -> str:
    return str(parse_event(line)["id"])


def damage_every_way(spool: Path) -> tuple[list[str], int]:
    """Damage one segment per kind; return the ids still intact on disk and how many events
    the damage destroyed."""
    segs = segments(spool)
    on_disk = [event_id(line) for seg in segs for line in records(seg)]
    destroyed: list[str] = []

    def edit(seg: Path, index: int, new: bytes, *, lost: bool) -> None:
        lines = records(seg)
        if lost:
            destroyed.append(event_id(lines[index]))
        lines[index] = new
        rewrite(seg, lines)

    def line(seg: Path, index: int) -> bytes:
        return records(seg)[index]

    # 0: two records fused by a deleted newline: both intact, both recovered.
    edit(segs[0], 2, line(segs[0], 2)[:-1], lost=False)
    # 1: a CRC field damaged into non-hex: destroyed.
    edit(segs[1], 1, line(segs[1], 1)[:-5] + b"zzzz\n", lost=True)
    # 2: a flipped payload byte: destroyed.
    flipped = bytearray(line(segs[2], 3))
    flipped[20] ^= 0x04
    edit(segs[2], 3, bytes(flipped), lost=True)
    # 3: the separator tab turned into a newline: the CRC still verifies, recovered.
    edit(segs[3], 0, line(segs[3], 0).replace(b"\t", b"\n"), lost=False)
    # 4: a stray newline inside a payload: destroyed, and no half of it ships as plain JSON.
    split = line(segs[4], 2)
    edit(segs[4], 2, split[:30] + b"\n" + split[31:], lost=True)
    # 5: fused by an overwritten newline, the first half damaged: one destroyed, one kept.
    fused = bytearray(line(segs[5], 1))
    fused[25] ^= 0x01
    fused[-1] = ord("#")
    edit(segs[5], 1, bytes(fused), lost=True)
    # last: its final record torn mid-way (the crash a sealed segment can still show).
    torn = line(segs[-1], -1)
    edit(segs[-1], -1, torn[: len(torn) // 2], lost=True)

    assert len(destroyed) == 5
    return [i for i in on_disk if i not in destroyed], len(destroyed)


def test_damaged_segments_balance_the_books_exactly(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    reporter = emit_into(spool)
    intact, destroyed = damage_every_way(spool)

    publisher = MemoryPublisher()
    status, health = run_agent(spool, publisher)
    assert status == 0
    assert publisher.ids() == intact  # each once, in segment order; nothing half-made
    assert health.shipped_events == len(intact)
    assert health.corrupted_records == destroyed
    assert health.dropped_events == reporter.dropped_full == dropped_events(spool)
    assert health.backlog_events == 0
    assert books(health) == EMITTED
    assert publisher.health[-1]["corrupted_records"] == destroyed
    assert list(spool.glob("*.jsonl")) == []  # every sealed segment shipped and retired


def test_the_books_balance_during_an_outage_and_after_it(tmp_path: Path) -> None:
    """Mid-outage, what is not shipped is backlog (a write in progress included); after it,
    the damage in the backlog is counted as corrupted and the rest ships."""
    spool = tmp_path / "spool"
    reporter = emit_into(spool)
    segs = segments(spool)
    first = records(segs[0])
    rewrite(segs[0], [first[0][:-1], *first[1:]])  # committed before the outage: recovered
    last = records(segs[-1])
    rewrite(segs[-1], [last[0], last[1][:-4] + b"zzz\n", *last[2:]])  # in the backlog
    pending = Reporter(job="open", spool_dir=spool, heartbeat_s=0)
    pending.span("eval", 1.0, 2.0)
    assert pending.flush()
    with open(pending.spool_path, "ab") as open_segment:
        open_segment.write(b'{"v":1,"id":"half-written')  # the writer caught mid-record

    down = MemoryPublisher(fail_from=2)
    status, during = run_agent(spool, down)
    assert status == 1  # --once asked for everything and did not get it
    assert during.shipped_events == len(down.ids()) == 100
    assert during.corrupted_records == 0
    assert during.backlog_events > 0
    assert books(during) == EMITTED + 2  # the open Reporter's event and the one in progress

    up = MemoryPublisher()
    status, after = run_agent(spool, up)
    assert status == 0
    assert after.corrupted_records == 1
    assert after.backlog_events == 1  # only the write still in progress
    assert after.dropped_events == reporter.dropped_full
    assert books(after) == EMITTED + 2
    assert len(set(down.ids() + up.ids())) == len(down.ids()) + len(up.ids())
    pending.shutdown()


# --------------------------------------------------------------------------- random damage
RECORDS = 12


def fuzz_payload(i: int) -> str:
    return dump_event({"v": 1, "id": f"{i:08x}{i * 7919:08x}-{i}", "job": "fuzz",
                       "attempt": 0, "kind": "span", "phase": "train",
                       "start": 1000.0 + i, "end": 1000.5 + i, "step_start": 10 * i,
                       "step_end": 10 * i + 10})


damage_ops = st.lists(
    st.one_of(st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
              st.tuples(st.just("cut-newline"), st.integers(0, RECORDS - 1), st.just(0))),
    min_size=1, max_size=3,
    unique_by=lambda op: (op[1] % RECORDS if op[0] == "cut-newline" else op[1]))


@settings(deadline=None, derandomize=True, max_examples=examples(400))
@given(ops=damage_ops)
def test_random_damage_yields_every_intact_record_and_one_problem_per_destroyed_one(
        tmp_path_factory: Any, ops: list[tuple[str, int, int]]) -> None:
    """Overwrite random bytes with random values and delete random newlines; a record is
    intact while its payload and its CRC digits are (the tab and the newline only frame
    it). The reader must return exactly the intact payloads, in order, and one problem per
    record that is not intact — whatever the damage did to the lines around it."""
    spool = tmp_path_factory.mktemp("fuzz")
    writer = SegmentWriter(spool, "fuzz.a0.r0")
    payloads = [fuzz_payload(i) for i in range(RECORDS)]
    assert writer.write(payloads) == RECORDS
    writer.close()
    (path,) = spool.glob("*.jsonl")
    data = bytearray(path.read_bytes())
    spans, pos = [], 0
    for payload in payloads:  # (payload start, tab, newline) of each record
        tab = pos + len(payload.encode())
        spans.append((pos, tab, tab + 9))
        pos = tab + 10
    touched: set[int] = set()
    edits: dict[int, int | None] = {}  # offset -> new byte, or None to delete it
    for kind, where, value in ops:
        if kind == "cut-newline":
            edits[spans[where][2]] = None
            continue
        offset = where % len(data)
        if value != data[offset]:
            edits[offset] = value
            touched.add(offset)
    for offset in sorted(edits, reverse=True):
        new = edits[offset]
        if new is None:
            del data[offset]
        else:
            data[offset] = new
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)

    intact = [payload for payload, (start, tab, end) in zip(payloads, spans, strict=True)
              if not any(start <= o < tab or tab < o < end for o in touched)]
    items = list(read_records(path))
    good = [payload for _end, payload, _problem in items if payload is not None]
    problems = [problem for _end, _payload, problem in items if problem is not None]
    assert good == intact
    assert len(problems) == RECORDS - len(intact), problems
    assert all(end <= len(data) for end, _payload, _problem in items)
