"""The first event a job's own Reporter wrote for one attempt, read from the shared spool.

Why the spool: ``collector.run`` and the job's Reporter (or adapter) write into the same
spool directory (the wrapper passes ``ETT_SPOOL_DIR`` to the command), and a Reporter names
its segments ``<job>.a<attempt>.r<rank>.<pid>...`` (``collector.spool``), so the job's first
event for an attempt is found without any channel between the two processes. The wrapper's
own segments carry its pid and are skipped. Each segment is read once, incrementally
(``collector.spool_reader``), only until an event is found.

Spans are written when they close, so the first event *written* is not always the one that
*started* first (an outer span closes after the spans inside it): the earliest start among
all the events written by the time the first one is seen is taken.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from collector.reporter import _safe
from collector.spool import SEGMENT_SUFFIX
from collector.spool_reader import read_records

__all__ = ["FirstEvent", "FirstEvents"]

#: A segment's name after ``<job>``: attempt, rank, pid, random part, sequence number.
_TAIL = re.compile(r"\.a(\d+)\.r(\d+)\.(\d+)\.[0-9a-f]{8}\.\d{5,}" + re.escape(SEGMENT_SUFFIX)
                   + "$")
#: Segments last written this long before the attempt began belong to an earlier run.
_STALE_S = 1.0


@dataclass(frozen=True)
class FirstEvent:
    """When the job's own reporting began in an attempt, and what said so."""

    time: float
    what: str  # the span's phase or the mark's name
    rank: int


class FirstEvents:
    """Looks for the job's own first event of an attempt in ``spool_dir``."""

    def __init__(self, spool_dir: Path, job: str, own_pid: int | None = None) -> None:
        self.spool_dir = spool_dir
        self.job = job
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._prefix = _safe(job)
        self._offsets: dict[str, int] = {}

    def find(self, attempt: int, since: float) -> FirstEvent | None:
        """The earliest event of ``attempt`` written so far by another process, or None.

        ``since`` is the attempt's start: segments not written since are an earlier run's.
        """
        best: FirstEvent | None = None
        for path in self._segments(attempt, since):
            for event in self._read(path):
                if event.get("job") != self.job or event.get("attempt") != attempt:
                    continue
                found = _first_of(event)
                if found is not None and (best is None or found.time < best.time):
                    best = found
        return best

    def _segments(self, attempt: int, since: float) -> list[Path]:
        found: list[Path] = []
        try:
            entries = list(os.scandir(self.spool_dir))
        except OSError:
            return found
        for entry in entries:
            name = entry.name
            if not name.startswith(self._prefix):
                continue
            tail = _TAIL.fullmatch(name, len(self._prefix))
            if tail is None or int(tail.group(1)) != attempt or \
                    int(tail.group(3)) == self.own_pid:
                continue
            try:
                if entry.stat().st_mtime < since - _STALE_S:
                    continue
            except OSError:
                continue
            found.append(Path(entry.path))
        return found

    def _read(self, path: Path) -> list[dict[str, object]]:
        offset = self._offsets.get(path.name, 0)
        events: list[dict[str, object]] = []
        try:
            for next_offset, payload, _problem in read_records(path, offset):
                offset = next_offset
                if payload is None:
                    continue
                try:
                    event = json.loads(payload)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
        except OSError:  # the agent retired the segment meanwhile
            pass
        self._offsets[path.name] = offset
        return events


def _first_of(event: dict[str, object]) -> FirstEvent | None:
    kind = event.get("kind")
    time_field, what_field = ("start", "phase") if kind == "span" else ("ts", "mark")
    when, what, rank = event.get(time_field), event.get(what_field), event.get("rank", 0)
    if not isinstance(when, int | float) or isinstance(when, bool):
        return None
    return FirstEvent(float(when), str(what), rank if isinstance(rank, int) else 0)
