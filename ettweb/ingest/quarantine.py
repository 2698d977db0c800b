"""Quarantine rows that can always be stored, and the batches parked there (issue 40).

A quarantine row keeps a rejected line (its first characters, its size and SHA-256), the
reason, the source and the job. Every text column is made storable first (``printable``):
Postgres text holds no NUL and no lone surrogate, and a row that failed on its text once
took the valid events of its whole batch with it (a job id ``"agentpath-\\ud800"``). A row
the database refuses anyway is stored again in ASCII (``save_quarantined``), and a batch
that cannot be stored at all is parked here whole (``park_batch``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from django.db import DataError, IntegrityError, transaction

from ettweb.ingest.models import QuarantinedEvent
from ettweb.platform.retry import DATABASE_ERRORS

logger = logging.getLogger(__name__)
#: A quarantined line keeps this many characters (plus its full size and SHA-256).
QUARANTINE_RAW_CHARS = 4096
#: The job id of a rejected line is looked for in its first characters only.
QUARANTINE_JOB_SCAN_CHARS = 65536
#: Why a parked line is in the quarantine (``park_batch``); the admin filters on it.
PARKED = "parked"


def job_of(raw: str) -> str:
    """Best-effort job id of a rejected line, so a job page can count its quarantined lines.

    The id is made storable (``printable``): the line was often rejected *for* its job id (a
    lone surrogate, issue 40), and the raw text holds it as a JSON escape that decoding
    brings back.
    """
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    job = obj.get("job") if isinstance(obj, dict) else None
    return printable(job)[:200] if isinstance(job, str) else ""


def printable(line: Any) -> str:
    """Raw text kept in quarantine; Postgres text cannot hold NUL or lone surrogates, so
    a NUL is written ``\\u0000`` and a lone surrogate ``\\udXXX``."""
    text = line if isinstance(line, str) else json.dumps(line, default=repr)
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def shown(line: Any) -> str:
    """``printable(line)``, or a placeholder for a value no encoder can show (nested too
    deeply, a repr that raises): a quarantine row must never fail to be built."""
    try:
        return printable(line)
    except Exception:  # any failure to show the line is shown as such
        return f"<a {type(line).__name__} that cannot be shown as text>"


def reject(line: Any, reason: str, source: str) -> QuarantinedEvent:
    """A quarantine row: the line's first characters, its full size and hash, the reason."""
    return build_row(line, reason, source, keep=QUARANTINE_RAW_CHARS)


def build_row(line: Any, reason: str, source: str, *, keep: int | None) -> QuarantinedEvent:
    """A quarantine row whose every text column is storable (``printable``): the raw line
    (its first ``keep`` characters, or all of it), the reason, the source and the job."""
    raw = shown(line)
    whole = raw.encode("utf-8")
    # The reason can quote the line (an unknown field's name) and the source is whatever
    # the publisher sent: both get the raw line's treatment, or a NUL fails the whole batch.
    return QuarantinedEvent(raw=raw if keep is None else raw[:keep], raw_bytes=len(whole),
                            raw_sha256=hashlib.sha256(whole).hexdigest(),
                            reason=shown(reason)[:2000], source=shown(source)[:200],
                            job=job_of(raw[:QUARANTINE_JOB_SCAN_CHARS]))


def quarantine_row(line: Any, reason: str, source: str) -> QuarantinedEvent:
    """An unsaved quarantine row for a line rejected before ingestion (an importer's line
    that no translator could read), kept exactly as the worker keeps its own rejections."""
    return reject(line, reason, source)


def error_text(exc: BaseException) -> str:
    """The first line of an error, with its type when it is no database refusal."""
    text = (str(exc).strip().splitlines() or [""])[0][:500]
    return text if isinstance(exc, DataError | IntegrityError) and text else (
        f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _last_resort(row: QuarantinedEvent, exc: BaseException) -> QuarantinedEvent:
    """The row again in ASCII alone (``ascii``: no NUL, no surrogate, nothing to encode):
    what is stored when the row as built could not be."""
    return QuarantinedEvent(
        raw=ascii(row.raw[:QUARANTINE_RAW_CHARS])[:QUARANTINE_RAW_CHARS],
        raw_bytes=row.raw_bytes, raw_sha256=ascii(row.raw_sha256)[:64], lines=row.lines,
        reason=ascii(f"{row.reason} (kept as ASCII: {error_text(exc)})")[:2000],
        source=ascii(row.source)[:200], job="")


def save_quarantined(rows: Sequence[QuarantinedEvent]) -> None:
    """Store quarantine rows; a row that cannot be stored as built is stored in ASCII
    (:func:`_last_resort`), so a bad line is never lost for want of a storable row."""
    if not rows:
        return
    try:
        with transaction.atomic():
            QuarantinedEvent.objects.bulk_create(rows)
        return
    except DATABASE_ERRORS:
        raise
    except Exception as exc:  # find the row at fault, store it in ASCII
        logger.warning("quarantine rows refused (%s); storing them one by one", error_text(exc))
    for row in rows:
        try:
            with transaction.atomic():
                QuarantinedEvent.objects.bulk_create([row])
        except DATABASE_ERRORS:
            raise
        except Exception as exc:
            row.pk = None
            QuarantinedEvent.objects.bulk_create([_last_resort(row, exc)])


def park_batch(lines: Sequence[Any], source: str, error: BaseException, tries: int) -> None:
    """Keep a batch that could not be stored after ``tries`` tries: every line goes to the
    quarantine *whole* (not its first characters: the line is to be ingested again once the
    cause is fixed), with a reason that starts with ``parked`` and names the error.

    Why park rather than raise: with ``task_acks_late`` a task that raises is acknowledged
    and its batch is gone; one that is requeued fails again, forever. The batch is signed
    (an unsigned one is refused before), so keeping it whole cannot be used to fill the
    database. If even these rows cannot be stored, the lines are written to the worker's
    log at CRITICAL, in ASCII: a batch is never acknowledged with its events nowhere.
    """
    reason = (f"{PARKED}: the batch could not be stored after {tries} tries "
              f"({error_text(error)}); this line is kept whole, to be ingested again once the "
              "cause is fixed")
    try:
        with transaction.atomic():
            save_quarantined([build_row(line, reason, source, keep=None) for line in lines])
    except Exception as exc:
        logger.critical("batch from %r parked in this log (%d lines): %s; the quarantine "
                        "refused it too (%s)", source, len(lines), error_text(error),
                        error_text(exc))
        for at, line in enumerate(lines):
            logger.critical("parked line %d/%d from %r: %s", at + 1, len(lines), source,
                            ascii(shown(line)))
    else:
        logger.error("batch from %r parked in the quarantine (%d lines): %s", source,
                     len(lines), error_text(error))
