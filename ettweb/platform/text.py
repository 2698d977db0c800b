"""Text rules every layer shares: what Postgres cannot store, how a moment is written, which
links may be shown.

They live below the apps so that the query layer, the rollouts' checks and the pages apply
one rule each without importing one another.

Postgres refuses a NUL character in ``text`` and in JSONB (``unsupported Unicode escape
sequence``), and UTF-8 has no encoding for a lone surrogate (U+D800-U+DFFF, which JSON's
``\\ud800`` escapes can still produce). Either one reaching a query is a 500; checked where
input is cleaned, it is a refusal that names the field.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final
from urllib.parse import urlsplit

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored, in words, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    if _SURROGATE.search(text):
        return "contains a lone surrogate (U+D800-U+DFFF), not text"
    return None


def iso_utc(moment: datetime) -> str:
    """``2026-10-12T09:30:00Z``: UTC with a Z, seconds kept, microseconds only if present."""
    text = moment.astimezone(UTC).replace(tzinfo=None).isoformat()
    return f"{text}Z"


def http_link(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host, else ``""``.

    Why so strict: a link is rendered as ``href`` on pages and in hover text; anything else
    (``javascript:``, ``data:``, a scheme-relative ``//host``) could run script or leave the
    product's pages unexpectedly. Stored links pass it on the way in
    (``ettweb.rollouts.validation.clean_rollout``) and again on the way out
    (``ettweb.queries.markers``), for rows written before or around the checks.
    """
    text = url.strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    return text if parts.scheme.lower() in ("http", "https") and parts.netloc else ""
