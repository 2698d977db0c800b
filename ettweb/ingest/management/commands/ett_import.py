"""``manage.py ett_import PATH...``: store schema-v1 event files as the worker would.

For a team's history on day one, a spool a collector never shipped, or a file from a
colleague: JSONL (plain or ``.gz``) and spool segments go through the worker's own ingest
logic (``ettweb.ingest.imports``), then the touched jobs' rollups are refreshed, so the
dashboard is current when the command returns. No worker or broker is needed, and importing
a file twice stores nothing new (event ids dedup).

Every path is checked before anything is imported: an unreadable one exits 2 with one line.
Batches are stored, and rollups refreshed, by ``--workers`` processes (one per core): the
work is Python under one GIL per process, and Postgres runs meanwhile.

``--format nvrx|goodput|torchtitan`` reads another tool's history instead: each file is
translated into schema-v1 events (``ettweb.importers``) and stored the same way
(``ettweb.ingest.foreign``); ``--job`` and ``--gpus`` supply what such logs may not say.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ettweb.importers.common import MAX_JOB_CHARS, Options
from ettweb.importers.formats import DESCRIPTIONS, TRANSLATORS
from ettweb.ingest.foreign import TranslationSummary, groups, import_foreign
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
EXIT_USAGE = 2
#: The command's own format: schema-v1 JSONL and spool segments, stored as they are.
ETT_FORMAT = "ett"
FORMATS = (ETT_FORMAT, *TRANSLATORS)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = ("Import schema-v1 JSONL files (plain or .gz) and collector spool segments through "
            "the worker's ingest logic, then refresh the rollups of the jobs they touch. "
            "With --format, translate another tool's history into events first.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                            help="event files: .jsonl, .jsonl.gz or spool segments (or the "
                                 "--format's files, plain or .gz)")
        parser.add_argument("--format", default=ETT_FORMAT, metavar="FORMAT",
                            help=f"{ETT_FORMAT}: schema-v1 events (default); " + "; ".join(
                                f"{name}: {text}" for name, text in DESCRIPTIONS.items()))
        parser.add_argument("--job", metavar="JOB",
                            help="job id of every translated event (a log that names none: "
                                 "default the file name)")
        parser.add_argument("--gpus", metavar="N",
                            help="GPUs per attempt where the log does not say (default 1)")
        parser.add_argument("--batch-lines", type=positive_int, default=DEFAULT_BATCH_LINES,
                            help=f"lines stored per transaction (default {DEFAULT_BATCH_LINES})")
        parser.add_argument("--workers", type=positive_int, default=default_workers(),
                            help="processes storing batches and refreshing rollups (default: "
                                 f"one per core, at most {MAX_WORKERS}; 1 works in-process)")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bars on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        paths: list[Path] = options["paths"]
        fmt, translated = options["format"], self._translation_options(options)
        self.show_progress = not options["no_progress"] and self.stderr.isatty()
        counts: TranslationSummary | None = None
        try:
            for path in paths:
                check_readable(path)
            if translated is None:
                summary = self._import(paths, options["batch_lines"], options["workers"])
            else:
                summary, counts = self._translate(paths, fmt, translated,
                                                  options["batch_lines"], options["workers"])
        except ImportFileError as exc:
            raise CommandError(str(exc), returncode=EXIT_UNREADABLE) from None
        refreshed = self._refresh(summary.jobs, options["workers"])
        what = f"{counts.line()}; " if counts is not None else ""
        self.stdout.write(f"imported {counted(len(paths), 'file')}: {what}{summary.line()}; "
                          f"{counted(refreshed.jobs, 'job')} refreshed in "
                          f"{refreshed.elapsed_s:.1f} s")

    @staticmethod
    def _translation_options(options: dict[str, Any]) -> Options | None:
        """The translators' options, None for ``--format ett``; bad usage exits 2 with one
        line (checked here, not by argparse, whose errors print the usage too)."""
        fmt, job, gpus = options["format"], options["job"], options["gpus"]
        if fmt not in FORMATS:
            raise CommandError(f"--format: unknown format {fmt!r} (choose from "
                               f"{', '.join(FORMATS)})", returncode=EXIT_USAGE)
        if fmt == ETT_FORMAT:
            if job is not None or gpus is not None:
                raise CommandError("--job and --gpus apply to --format "
                                   f"{', '.join(TRANSLATORS)}: schema-v1 events carry their "
                                   "own", returncode=EXIT_USAGE)
            return None
        if job is not None and not 1 <= len(job.strip()) <= MAX_JOB_CHARS:
            raise CommandError(f"--job: a job id has 1-{MAX_JOB_CHARS} characters",
                               returncode=EXIT_USAGE)
        count = 1
        if gpus is not None:
            if not (gpus.isascii() and gpus.isdigit() and int(gpus) >= 1):
                raise CommandError(f"--gpus: {gpus!r} is not a whole number >= 1",
                                   returncode=EXIT_USAGE)
            count = int(gpus)
        return Options(job=job.strip() if job else None, gpus=count)

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

    def _translate(self, paths: list[Path], fmt: str, options: Options, batch_lines: int,
                   workers: int) -> tuple[ImportSummary, TranslationSummary]:
        summary, counts = EMPTY, TranslationSummary(fmt)
        with self._bar(f"importing {fmt}", " events") as bar:
            for group in groups(fmt, paths, options):
                bar.set_postfix_str(group[0].name, refresh=False)
                stored, made = import_foreign(group, fmt, options, batch_lines=batch_lines,
                                              progress=bar.update, workers=workers)
                summary, counts = summary + stored, counts + made
        return summary, counts

    def _refresh(self, jobs: tuple[str, ...], workers: int) -> RefreshStats:
        with self._bar("refreshing rollups", " jobs", total=len(jobs)) as bar:
            return refresh_imported(jobs, progress=bar.update, workers=workers)
