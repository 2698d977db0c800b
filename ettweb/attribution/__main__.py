"""The offline report (ETT_SPEC §5): ``python -m ettweb.attribution EVENTS.jsonl [...]``.

No database and no server: anyone holding a JSONL file can reproduce the numbers the
dashboard shows, because the same engine computes them.

Input decisions, documented here because the spec leaves them open:

* A blank (whitespace-only) line is not an event and is skipped without a rejection; it still
  counts for line numbers so ``rejected[].line`` matches an editor's line numbers.
* With several files, line numbers restart at 1 in each file and every rejection also names
  its ``file``; with one file the entries are exactly ``{"line", "reason"}`` as in §5.
* ``-`` reads standard input.
* Files are read with the spool's reader (``collector.spool_reader.read_records``), so
  Reporter spool segments work as they are: checksums are verified (a corrupted record is a
  rejection with its reason). A last line without its newline is read like any other line
  (the report is a snapshot; in a sealed segment such a tail is a torn record and rejected
  as one).
* Each job entry carries two keys beyond §5 (extra keys leave §5's shape intact):
  ``recoveries`` (one ``{"attempt", "start", "end", "by_category"}`` per value of
  ``time_to_recover_s``: the restart tax by category) and ``anomalies`` (counts of
  inconsistent-but-valid things, see ``engine.ANOMALY_KINDS``; ``{}`` when none).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

from collector.schema import EventError, parse_event
from collector.spool_reader import read_records

from .components import DEFAULT_PHASE_COMPONENTS
from .engine import Event, FleetAttribution, JobAttribution, attribute, gc_paused

EXIT_OK = 0
EXIT_UNREADABLE = 2
Rejection = dict[str, Any]


class SpoolProblem(str):
    """A spool record the reader could not recover; the text is the reason."""


def parse_lines(
    lines: Iterable[str | bytes], *, source: str | None = None
) -> tuple[list[Event], list[Rejection]]:
    """Split JSONL lines into valid events and rejections (1-based line numbers).

    A bad line never takes the good ones with it (§2): it is kept aside with its reason.
    """
    events: list[Event] = []
    rejected: list[Rejection] = []
    with gc_paused():  # one dict per line, no cycles: see engine.gc_paused
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                if isinstance(line, SpoolProblem):
                    raise EventError(str(line))
                events.append(parse_event(line))
            except EventError as err:
                entry: Rejection = {"line": number, "reason": str(err)}
                if source is not None:
                    entry["file"] = source
                rejected.append(entry)
    return events, rejected


def report_from_lines(lines: Iterable[str | bytes]) -> dict[str, Any]:
    """The §5 document for one JSONL stream, as a dict (the web side and tests call this)."""
    events, rejected = parse_lines(lines)
    return build_report(attribute(events), rejected)


def build_report(fleet: FleetAttribution, rejected: list[Rejection]) -> dict[str, Any]:
    """Shape an attribution into the §5 document; key order follows the spec."""
    return {
        "jobs": [_job_entry(job) for job in fleet.jobs],
        "fleet": {
            "wall_gpu_s": fleet.wall_gpu_s,
            "productive_gpu_s": fleet.productive_gpu_s,
            "ett_pct": round(fleet.ett_pct, 2),
        },
        "rejected": rejected,
        "duplicates": fleet.duplicates,
    }


def _job_entry(job: JobAttribution) -> dict[str, Any]:
    return {
        "job": job.job,
        "attempts": len(job.attempts),
        "wall_s": job.wall_s,
        "productive_s": job.productive_s,
        "ett_pct": round(job.ett_pct, 2),
        "wall_gpu_s": job.wall_gpu_s,
        "productive_gpu_s": job.productive_gpu_s,
        "repeated_steps": job.repeated_steps,
        "time_to_start_s": job.time_to_start_s,
        "time_to_recover_s": job.time_to_recover_s,
        "failures": job.failures,
        "lost_s": dict(sorted(job.lost_s.items())),
        "lost_by_component_s": dict(
            sorted(job.lost_by_component_s(DEFAULT_PHASE_COMPONENTS).items())
        ),
        "recoveries": [
            {"attempt": r.attempt, "start": r.start, "end": r.end,
             "by_category": dict(sorted(r.by_category.items()))}
            for r in job.recoveries
        ],
        "anomalies": dict(sorted(job.anomalies.items())),
    }


def _read(path: str) -> list[str | bytes]:
    """All lines of one input; OSError propagates so nothing is printed for a bad file."""
    if path == "-":
        return list(_lines(sys.stdin.buffer))
    return [SpoolProblem(problem) if problem else (payload or "")
            for _end, payload, problem in read_records(path, final=True)]


def _lines(stream: BinaryIO) -> list[bytes]:
    return stream.read().splitlines()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ettweb.attribution",
        description=(
            "Offline ETT report (ETT_SPEC section 5): read schema-v1 JSONL event files and "
            "print one JSON document with each job's ETT%, wall and productive (GPU-)seconds, "
            "lost time by category and by owning component, and the fleet's GPU-weighted "
            "ETT%. Invalid lines are listed under 'rejected' with their reason; the rest is "
            "still reported."
        ),
        epilog="Exit status: 0 on success (even with rejected lines), 2 if a file cannot be read.",
    )
    parser.add_argument(
        "files", nargs="+", metavar="EVENTS.jsonl",
        help="event files, one JSON event per line ('-' reads standard input)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (also the ``ett-report`` script); returns the exit status."""
    args = _parser().parse_args(argv)
    events: list[Event] = []
    rejected: list[Rejection] = []
    several = len(args.files) > 1
    for path in args.files:
        try:
            lines = _read(path)
        except OSError as err:
            reason = err.strerror or str(err)
            print(f"ett-report: cannot read {path}: {reason}", file=sys.stderr)
            return EXIT_UNREADABLE
        file_events, file_rejected = parse_lines(lines, source=path if several else None)
        events.extend(file_events)
        rejected.extend(file_rejected)
    document = build_report(attribute(events), rejected)
    print(json.dumps(document, indent=2, allow_nan=False))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
