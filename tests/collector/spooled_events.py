"""The events a spool holds, parsed as the collector ships them (tests' shared reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collector.schema import parse_event
from collector.spool_reader import read_records


def spooled(spool: Path) -> list[dict[str, Any]]:
    """Every event of every ``*.jsonl`` segment in ``spool``, in file order; a damaged
    record fails the test."""
    events = []
    for path in sorted(spool.glob("*.jsonl")):
        for _, payload, problem in read_records(path, final=True):
            assert problem is None
            if payload is not None:
                events.append(parse_event(payload))
    return events
