"""``manage.py ett_import PATH...``: store schema-v1 event files as the worker would.

For a team's history on day one, a spool a collector never shipped, or a file from a
colleague: JSONL (plain or ``.gz``) and spool segments go through the worker's own ingest
logic (``ettweb.ingest.imports``), then the touched jobs' rollups are refreshed, so the
dashboard is current when the command returns. No worker or broker is needed, and importing
a file twice stores nothing new (event ids dedup).

Every path is checked before anything is imported: an unreadable one exits 2 with one line.
Batches are stored, and rollups refreshed, by ``--workers`` processes (one per core): the
work is Python under one GIL per process, and Postgres runs meanwhile.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ettweb.ingest.imports import (
    DEFAULT_BATCH_LINES,
    EMPTY,
    MAX_WORKERS,
    ImportFileError,
    ImportSummary,
    check_readable,
    counted,
    default_workers,
    import_lines,
    read_lines,
    refresh_imported,
)
from ettweb.rollups.refresh import RefreshStats

EXIT_UNREADABLE = 2


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = ("Import schema-v1 JSONL files (plain or .gz) and collector spool segments through "
            "the worker's ingest logic, then refresh the rollups of the jobs they touch.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                            help="event files: .jsonl, .jsonl.gz or spool segments")
        parser.add_argument("--batch-lines", type=positive_int, default=DEFAULT_BATCH_LINES,
                            help=f"lines stored per transaction (default {DEFAULT_BATCH_LINES})")
        parser.add_argument("--workers", type=positive_int, default=default_workers(),
                            help="processes storing batches and refreshing rollups (default: "
                                 f"one per core, at most {MAX_WORKERS}; 1 works in-process)")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bars on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        paths: list[Path] = options["paths"]
        self.show_progress = not options["no_progress"] and self.stderr.isatty()
        try:
            for path in paths:
                check_readable(path)
            summary = self._import(paths, options["batch_lines"], options["workers"])
        except ImportFileError as exc:
            raise CommandError(str(exc), returncode=EXIT_UNREADABLE) from None
        refreshed = self._refresh(summary.jobs, options["workers"])
        self.stdout.write(f"imported {counted(len(paths), 'file')}: {summary.line()}; "
                          f"{counted(refreshed.jobs, 'job')} refreshed in "
                          f"{refreshed.elapsed_s:.1f} s")

    def _bar(self, description: str, unit: str, total: int | None = None) -> tqdm[Any]:
        return tqdm(desc=description, unit=unit, total=total, file=sys.stderr,
                    disable=not self.show_progress, unit_scale=True, dynamic_ncols=True)

    def _import(self, paths: list[Path], batch_lines: int, workers: int) -> ImportSummary:
        summary = EMPTY
        with self._bar("importing", " events") as bar:
            for path in paths:
                bar.set_postfix_str(path.name, refresh=False)
                summary += import_lines(read_lines(path), source=f"import:{path.name}",
                                        batch_lines=batch_lines, progress=bar.update,
                                        workers=workers)
        return summary

    def _refresh(self, jobs: tuple[str, ...], workers: int) -> RefreshStats:
        with self._bar("refreshing rollups", " jobs", total=len(jobs)) as bar:
            return refresh_imported(jobs, progress=bar.update, workers=workers)
