"""Import another tool's history: translate its file, then store it as any event is stored.

Why here, beside ``imports``: the translators (``ettweb.importers``) are pure and know
nothing of the database; this is where their output meets it. Translated events go through
:func:`~ettweb.ingest.imports.import_lines`, the worker's own ingest logic, so they are
validated, deduplicated by id and quarantined with reasons like any event. Lines a translator
could not read are quarantined too, with the translator's reason and the same source
(``import:<file name>``), so nothing a file held is silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from collector.schema import dump_event
from ettweb.importers.common import Options, Rejected
from ettweb.importers.formats import NAMELESS, translate
from ettweb.ingest.batches import quarantine_row
from ettweb.ingest.imports import (
    DEFAULT_BATCH_LINES,
    ImportSummary,
    Progress,
    counted,
    import_lines,
    read_lines,
)
from ettweb.ingest.models import QuarantinedEvent


@dataclass(frozen=True)
class TranslationSummary:
    """What translating some files made: lines read, events made (of which
    ``unattributed`` spans), lines that were no event of the format (``skipped``), and lines
    rejected before ingestion (quarantined; also counted in the import's ``rejected``)."""

    fmt: str
    lines: int = 0
    events: int = 0
    unattributed: int = 0
    skipped: int = 0
    rejected: int = 0

    def line(self) -> str:
        """``52 nvrx lines made 21 events (2 unattributed), 30 other lines skipped``."""
        return (f"{counted(self.lines, f'{self.fmt} line')} made "
                f"{counted(self.events, 'event')} ({self.unattributed:,} unattributed), "
                f"{counted(self.skipped, 'other line')} skipped")

    def __add__(self, other: TranslationSummary) -> TranslationSummary:
        return TranslationSummary(self.fmt, self.lines + other.lines,
                                  self.events + other.events,
                                  self.unattributed + other.unattributed,
                                  self.skipped + other.skipped, self.rejected + other.rejected)


def text_lines(path: Path) -> Iterator[str]:
    """A file's lines as text (plain or .gz), invalid UTF-8 replaced, blank lines left out."""
    for line in read_lines(path):
        yield line.decode("utf-8", errors="replace")


class _Files:
    """Several files read as one stream of lines, remembering which file each line was in
    (a rejected line is quarantined under its own file's name)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.ends: list[tuple[int, str]] = []  # (last line number, file name)

    def lines(self) -> Iterator[str]:
        count = 0
        for path in self.paths:
            for line in text_lines(path):
                count += 1
                yield line
            self.ends.append((count, path.name))

    def source(self, line: int) -> str:
        name = next((name for last, name in self.ends if line <= last), self.paths[-1].name)
        return f"import:{name}"


def groups(fmt: str, paths: list[Path], options: Options) -> list[list[Path]]:
    """The files translated together: all of them (one job's nodes, attempts or entries,
    which may be split over files), except logs that name no job when ``--job`` is not
    given: each of those is a job of its own, named after its file."""
    if fmt in NAMELESS and options.job is None:
        return [[path] for path in paths]
    return [paths]


def _quarantine(rejected: list[Rejected], files: _Files) -> ImportSummary:
    """Keep the lines a translator rejected, as the worker keeps the lines it rejects."""
    QuarantinedEvent.objects.bulk_create(
        [quarantine_row(item.raw, item.reason, files.source(item.line)) for item in rejected],
        batch_size=1000)
    reasons: dict[str, int] = {}
    for item in rejected:
        reasons[item.reason] = reasons.get(item.reason, 0) + 1
    return ImportSummary(stored=0, duplicates=0, rejected=len(rejected), reasons=reasons,
                         jobs=())


def import_foreign(paths: list[Path], fmt: str, options: Options, *,
                   batch_lines: int = DEFAULT_BATCH_LINES, progress: Progress | None = None,
                   workers: int | None = None) -> tuple[ImportSummary, TranslationSummary]:
    """Translate ``paths`` (format ``fmt``, read as one stream) and store the events through
    ``import_lines``.

    The files are translated whole first (a translator pairs lines from anywhere in them: a
    failure with its teardown, a step with the next), then stored batch by batch. Raises
    ImportFileError when a file cannot be read; call ``refresh_imported`` afterwards.
    """
    files = _Files(paths)
    translation = translate(fmt, files.lines(), replace(options, source=paths[0].name))
    summary = _quarantine(translation.rejected, files) if translation.rejected else None
    source = "import:" + ", ".join(path.name for path in paths)
    stored = import_lines((dump_event(event) for event in translation.events),
                          source=source[:200], batch_lines=batch_lines, progress=progress,
                          workers=workers)
    counts = TranslationSummary(fmt, translation.lines, len(translation.events),
                                translation.unattributed, translation.skipped,
                                len(translation.rejected))
    return (stored + summary if summary else stored), counts
