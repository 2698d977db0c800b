"""A page's table as a CSV download (``?format=csv``), safe to open in a spreadsheet.

Job names, teams and clusters come from outside. A cell that starts with ``=``, ``+``, ``-``
or ``@`` (or a tab or carriage return) is a formula to Excel, LibreOffice and Google Sheets, so
such text cells get a leading apostrophe (OWASP's "CSV injection" advice). Numbers are written
as numbers: a negative change is data, not a formula.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralized(value: object) -> object:
    """``value`` as a spreadsheet cannot run it: text that starts a formula gets a ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_response(filename: str, header: Sequence[str],
                 rows: Iterable[Sequence[object]]) -> HttpResponse:
    """A CSV attachment: one header row, then ``rows`` with every text cell neutralized."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows([neutralized(cell) for cell in row] for row in rows)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
