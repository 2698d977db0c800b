"""``ett_wait_ingested`` returns once enough lines are in, and fails clearly on timeout."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ettweb.ingest.logic import ingest_lines

pytestmark = pytest.mark.django_db


def test_returns_when_lines_are_ingested(worked_example_lines: list[str]) -> None:
    ingest_lines([*worked_example_lines, "{bad"])
    out = StringIO()
    call_command("ett_wait_ingested", events=len(worked_example_lines) + 1, timeout=1, stdout=out)
    assert out.getvalue().strip() == f"ingested {len(worked_example_lines)} events, 1 quarantined"


def test_times_out_with_counts() -> None:
    with pytest.raises(CommandError, match=r"timed out: 0 stored \+ 0 quarantined < 3 lines"):
        call_command("ett_wait_ingested", events=3, timeout=0.1)
