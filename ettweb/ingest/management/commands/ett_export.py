"""``manage.py ett_export [--job J ...] [--since DAY] [--until DAY] [--output PATH]``.

Writes the stored events as schema-v1 JSONL (standard output by default, gzip when the
output name ends in ``.gz``), so ``python -m ettweb.attribution FILE`` runs on exactly what
the dashboard shows. A file is written beside its final name and renamed when complete:
a failed export never leaves half a file where a report would read it.

A bad flag exits 2 with one line naming it; the last line on stderr counts what was written.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import sys
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ettweb.ingest.exports import ExportFilter, ExportStats, count_events, export_events, parse_day
from ettweb.ingest.imports import counted

EXIT_BAD_FLAG = 2
#: gzip's default level 9 costs about twice the CPU of 6 for a few percent smaller files.
GZIP_LEVEL = 6


def _plain(text: str) -> str:
    return text


def _day(flag: str, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return parse_day(value)
    except ValueError as exc:
        raise CommandError(f"{flag}: {exc}", returncode=EXIT_BAD_FLAG) from None


def _open(path: Path, partial: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(partial, "wb", compresslevel=GZIP_LEVEL)
    return partial.open("wb")


@contextlib.contextmanager
def _file(path: Path) -> Iterator[io.BufferedIOBase]:
    """``path`` opened for writing (gzip for ``.gz``), renamed into place only on success."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        stream = _open(path, partial)
    except OSError as exc:
        raise CommandError(f"--output: cannot write {path}: {exc.strerror or exc}",
                           returncode=EXIT_BAD_FLAG) from None
    try:
        with stream:
            yield stream
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


class Command(BaseCommand):
    help = ("Write stored events as schema-v1 JSONL (ordered by job, event time, id) for the "
            "offline report: python -m ettweb.attribution FILE.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--job", action="extend", nargs="+", default=[], metavar="J",
                            help="only these jobs (repeatable; default: every job)")
        parser.add_argument("--since", metavar="DAY",
                            help="first UTC day (YYYY-MM-DD) of event time, inclusive")
        parser.add_argument("--until", metavar="DAY",
                            help="last UTC day (YYYY-MM-DD) of event time, inclusive")
        parser.add_argument("--output", type=Path, metavar="PATH",
                            help="file to write (.gz: gzip); default: standard output")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        selection = self._selection(options)
        output: Path | None = options["output"]
        if output is None:
            try:
                stats = self._export(self._stdout_writer(), selection, options["no_progress"])
            except BrokenPipeError:  # `ett_export | head`: the reader has all it wanted
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return
            where = "standard output"
        else:
            with _file(output) as stream:
                stats = self._export(stream.write, selection, options["no_progress"])
            where = str(output)
        self.stderr.write(f"exported {counted(stats.events, 'event')} of "
                          f"{counted(stats.jobs, 'job')} to {where}",
                          style_func=_plain)  # a count, not an error: no red on a terminal

    @staticmethod
    def _selection(options: dict[str, Any]) -> ExportFilter:
        since, until = _day("--since", options["since"]), _day("--until", options["until"])
        if since is not None and until is not None and since > until:
            raise CommandError(f"--since: {since} is after --until {until}",
                               returncode=EXIT_BAD_FLAG)
        return ExportFilter(jobs=tuple(dict.fromkeys(options["job"])), since=since,
                            until=until)

    def _stdout_writer(self) -> Callable[[bytes], object]:
        """Bytes to the real stdout; text where the caller gave a text stream (call_command)."""
        buffer = getattr(self.stdout, "buffer", None)
        if buffer is not None:
            return buffer.write
        return lambda data: self.stdout.write(data.decode(), ending="")

    def _export(self, write: Callable[[bytes], object], selection: ExportFilter,
                no_progress: bool) -> ExportStats:
        show = not no_progress and self.stderr.isatty()
        total = count_events(selection) if show else None
        with tqdm(desc="exporting", unit=" events", total=total, file=sys.stderr,
                  disable=not show, unit_scale=True, dynamic_ncols=True) as bar:
            stats = export_events(write, selection, progress=bar.update)
        flush = getattr(self.stdout, "flush", None)
        if flush is not None:
            flush()
        return stats
