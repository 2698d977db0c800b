"""Hypothesis strategies over whole batches and spool files, each with its books (issue 40,
part 3).

A :class:`Fuzzed` batch knows, by construction, what ingestion must make of every line: the
ids of its valid events (each to be stored exactly once, whatever else the batch holds), the
lines that must be quarantined with a reason, and the copies that must count as duplicates.
Valid events reach for the edges the schema and the database allow: times anywhere in the
last 20 days (always inside the ingestion window), spans of 0 s and of exactly 30 days,
marks without any span, steps up to 2^63 - 1, attempts and ranks up to 2^31 - 1, any
Unicode but lone surrogates and NUL in every string, attrs nested or filling their 8 KiB.
Invalid lines are the corpus's (``bench.fuzz_stages.corpus``: every kind of broken JSON,
type, value, span, mark, UTF-8 and checksum) and Hypothesis's own: every kind of broken
Unicode (each surrogate range, NUL) in every string field, non-finite and out-of-range
numbers, times outside the window.

``spool_file`` writes a batch as a collector segment (CRC-framed records, the raw bytes of a
non-UTF-8 line framed as they are) for reading back through ``collector.spool_reader``, the
agent's own reader.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bench.fuzz_stages.corpus import BUILDERS, OUT_OF_WINDOW, RECENT

Line = str | bytes
MAX_SPAN_S = 30 * 86400.0
BIGINT_MAX, INT_MAX = 2**63 - 1, 2**31 - 1
#: Text that is always storable: any code point but the surrogates (Cs) and NUL.
GOOD_TEXT = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
#: Every kind of text Postgres cannot store, as the JSON escape a line carries it in.
BROKEN_TEXT = st.one_of(
    st.integers(0xD800, 0xDBFF).map(lambda c: f"\\u{c:04x}"),  # a lone high surrogate
    st.integers(0xDC00, 0xDFFF).map(lambda c: f"\\u{c:04x}"),  # a lone low surrogate
    st.integers(0xDC00, 0xDFFF).map(lambda c: f"\\u{c:04x}\\ud800"),  # reversed pair
    st.just("\\u0000"))
#: Later than now + 1 day for as long as the process runs (a constant: Hypothesis replays
#: draws, so a bound that moved with the clock would be data generation changing under it).
FUTURE = time.time() + 2 * 86400
STRING_FIELDS = ("job", "id", "host", "attrs_key", "attrs_value", "attrs_nested")


@dataclass
class Fuzzed:
    """A batch and its books."""

    tag: str = ""
    lines: list[Line] = field(default_factory=list)
    #: id -> job of each valid event (the first copy of an id is the one stored).
    valid: dict[str, str] = field(default_factory=dict)
    #: Lines to be quarantined, each with a reason.
    invalid: int = 0
    #: Lines that repeat a valid event's id (the same line again, or another with its id).
    duplicates: int = 0

    @property
    def size(self) -> int:
        return sum(len(line) for line in self.lines)

    def replicated(self, times: int) -> Fuzzed:
        """The batch ``times`` over, each copy's ids and jobs made its own (the tag renamed),
        with its books: how a test gets a batch of thousands of lines out of a draw that
        Hypothesis keeps to tens (its data budget)."""
        big = Fuzzed(tag=self.tag)
        for copy in range(times):
            tag = f"{self.tag}x{copy}"
            big.lines += [line.replace(self.tag, tag) if isinstance(line, str)
                          else line.replace(self.tag.encode(), tag.encode())
                          for line in self.lines]
            big.valid.update({ident.replace(self.tag, tag): job.replace(self.tag, tag)
                              for ident, job in self.valid.items()})
            big.invalid += self.invalid
            big.duplicates += self.duplicates
        return big


def _dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def _fits(attrs: dict[str, Any]) -> bool:
    """Whether attrs are within schema v1's 8 KiB (compact JSON, UTF-8)."""
    return len(json.dumps(attrs, separators=(",", ":"), ensure_ascii=False).encode()) <= 8192


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-BIGINT_MAX, BIGINT_MAX),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(GOOD_TEXT,
                                                                                max_size=40))
ATTRS = st.one_of(
    st.just({}),
    st.recursive(_SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(GOOD_TEXT, max_size=12), inner,
                                                     max_size=4)), max_leaves=30)
    .map(lambda value: {"v": value}),
    st.integers(1000, 8000).map(lambda n: {"blob": "x" * n}),  # up to the 8 KiB bound
).filter(_fits)


@st.composite
def valid_event(draw: st.DrawFn, job: str, ident: str) -> dict[str, Any]:
    """A valid event of ``job`` at the edges of what is storable."""
    end = draw(st.floats(*RECENT))
    common: dict[str, Any] = {
        "v": 1, "id": ident, "job": job,
        "attempt": draw(st.sampled_from([0, 1, INT_MAX]) | st.integers(0, INT_MAX)),
        "rank": draw(st.sampled_from([0, INT_MAX]) | st.integers(0, 1024)),
    }
    if draw(st.booleans()):
        common["host"] = draw(st.text(GOOD_TEXT, max_size=200))
    attrs = draw(ATTRS)
    if draw(st.booleans()):  # a mark: a heartbeat or an attempt_start (no span needed)
        mark = draw(st.sampled_from(["heartbeat", "attempt_start"]))
        event = {**common, "kind": "mark", "mark": mark, "ts": end}
        if mark == "heartbeat" and draw(st.booleans()):
            event["step"] = draw(st.sampled_from([0, BIGINT_MAX]) | st.integers(0, 10**9))
        if mark == "attempt_start":
            attrs = {**attrs, "gpus": draw(st.integers(1, 4096))} if _fits(
                {**attrs, "gpus": 4096}) else {"gpus": 8}
    else:
        length = draw(st.sampled_from([0.0, MAX_SPAN_S]) | st.floats(0, MAX_SPAN_S))
        phase = draw(st.sampled_from(["train", "compile", "checkpoint_save", "x.y-z_9"]))
        event = {**common, "kind": "span", "phase": phase, "start": end - length, "end": end,
                 "blocking": draw(st.booleans())}
        if phase == "train":
            first = draw(st.integers(0, BIGINT_MAX))
            event.update(step_start=first, step_end=draw(st.integers(first, BIGINT_MAX)))
    if attrs:
        event["attrs"] = attrs
    return event


@st.composite
def broken_text_line(draw: st.DrawFn, job: str, ident: str) -> str:
    """A valid event but for one string field holding a lone surrogate or a NUL (issue 40's
    ``"job": "agentpath-\\ud800"`` among them)."""
    event = draw(valid_event(job, ident))
    where = draw(st.sampled_from(STRING_FIELDS))
    marker = "\x01MARK\x01"  # escaped by json.dumps as \u0001: never in other text
    if where.startswith("attrs"):
        attrs = dict(event.get("attrs", {}))
        attrs.pop("blob", None)
        attrs = ({marker: 1} if where == "attrs_key" else {"k": marker}
                 if where == "attrs_value" else {"k": [{"deep": [marker]}]})
        event["attrs"] = {**attrs, "gpus": 1} if event.get("mark") == "attempt_start" \
            else attrs
    elif where == "id":
        event["id"] = f"{ident[:40]}{marker}"
    else:
        event[where] = f"{event.get(where, '')[:150]}{marker}"
    text = json.dumps(event, separators=(",", ":"))
    return text.replace("\\u0001MARK\\u0001", draw(BROKEN_TEXT))


@st.composite
def out_of_range_line(draw: st.DrawFn, job: str, ident: str) -> str:
    """A valid event but for one number: a time outside the ingestion window, a non-finite
    time, or an integer beyond its column."""
    event = draw(valid_event(job, ident))
    choice = draw(st.sampled_from(["time", "nonfinite", "int"]))
    if choice == "time":
        value = draw(st.sampled_from(OUT_OF_WINDOW) | st.floats(FUTURE, 1e300))
        name = "ts" if event["kind"] == "mark" else draw(st.sampled_from(["start", "end"]))
        event[name] = value
        if event["kind"] == "span":  # keep start <= end and the span's length valid
            event["start"] = event["end"] = value
    elif choice == "nonfinite":
        name = "ts" if event["kind"] == "mark" else "start"
        event[name] = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    else:
        name = draw(st.sampled_from(["attempt", "rank"]))
        event[name] = draw(st.integers(INT_MAX + 1, 2**70))
    return json.dumps(event, separators=(",", ":"), allow_nan=True)


@st.composite
def batches(draw: st.DrawFn, tag: str, *, max_valid: int = 20, max_invalid: int = 10,
            jobs: int = 3) -> Fuzzed:
    """A whole batch: valid events of a few jobs, invalid lines of every kind, duplicates
    (the same line again, or another line with a stored id), in any order. ``tag`` makes its
    ids and jobs its own (a fresh one per batch: Hypothesis draws alike batches often)."""
    names = [f"fz-{tag}-{n}" for n in range(jobs)]
    batch = Fuzzed(tag=tag)
    items: list[tuple[str, Line]] = []
    for n in range(draw(st.integers(0, max_valid))):
        ident = f"{tag}-{n}"
        job = draw(st.sampled_from(names))
        event = draw(valid_event(job, ident))
        batch.valid[ident] = job
        items.append(("valid", _dumps(event)))
        if draw(st.integers(0, 9)) == 0:  # a duplicate: the same line, or a changed copy
            again = _dumps(event) if draw(st.booleans()) else _dumps(
                {**event, "rank": event["rank"] // 2})
            items.append(("duplicate", again))
    rng = draw(st.randoms(use_true_random=False))
    for n in range(draw(st.integers(0, max_invalid))):
        ident, job = f"{tag}-bad-{n}", draw(st.sampled_from(names))
        kind = draw(st.sampled_from(["corpus", "text", "number"]))
        line: Line = (rng.choice(BUILDERS)(rng) if kind == "corpus"
                      else draw(broken_text_line(job, ident)) if kind == "text"
                      else draw(out_of_range_line(job, ident)))
        items.append(("invalid", line))
    order = draw(st.permutations(range(len(items)))) if items else []
    for at in order:
        kind, line = items[at]
        batch.lines.append(line)
        batch.invalid += kind == "invalid"
        batch.duplicates += kind == "duplicate"
    # The first copy of an id is the one stored: if a changed duplicate came first, it is
    # the stored one and the original the duplicate; the books are the same.
    return batch


def spool_record(line: Line) -> bytes:
    """One spool record of ``line`` (``collector.spool.frame``), bytes framed as they are."""
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    return raw + b"\t%08x\n" % zlib.crc32(raw)


def spool_file(batch: Fuzzed, directory: Path) -> Path:
    """Write ``batch`` as a sealed collector segment (read-only: its writer is done)."""
    path = directory / f"fz.a0.r0.{random.randrange(10**6)}.{random.getrandbits(32):08x}" \
        ".00001.jsonl"
    path.write_bytes(b"".join(spool_record(line) for line in batch.lines))
    path.chmod(0o444)
    return path
