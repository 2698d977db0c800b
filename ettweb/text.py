"""What Postgres cannot store in text: the one check every free-text input goes through.

Postgres refuses a NUL character in ``text`` and in JSONB (``unsupported Unicode escape
sequence``), and UTF-8 has no encoding for a lone surrogate (U+D800-U+DFFF, which JSON's
``\\ud800`` escapes can still produce). Either one reaching a query is a 500; checked where
input is cleaned, it is a refusal that names the field.
"""

from __future__ import annotations

import re
from typing import Final

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored, in words, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    if _SURROGATE.search(text):
        return "contains a lone surrogate (U+D800-U+DFFF), not text"
    return None
