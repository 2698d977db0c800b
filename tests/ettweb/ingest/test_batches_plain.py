"""A batch is asked once whether all its lines are plain (``batches._all_plain``): the answer
must be every line's own (``collector.schema.is_plain``), whatever the lines hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.schema import is_plain
from ettweb.ingest.batches import _all_plain
from tests.examples import examples

#: Pieces that make a line not plain, or nearly: cut across a line's end they must not count.
_PIECES = ["\\u", "\\", "u", "NaN", "Na", "N", "Infinity", "Infin", "ity", "9" * 19, "9" * 10,
           "9" * 9, "é", '{"v":1}', ",", " ", "1e308", "\t"]
_LINES = st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=6).map("".join)


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(_LINES, max_size=8))
def test_the_joined_batch_is_plain_exactly_when_every_line_is(lines: list[str]) -> None:
    assert _all_plain(lines) == all(is_plain(line) for line in lines)
    encoded = [line.encode("utf-8", "surrogatepass") for line in lines]
    assert _all_plain(encoded) == all(is_plain(line) for line in encoded)


def test_a_batch_mixing_text_and_bytes_is_asked_line_by_line() -> None:
    assert not _all_plain(['{"v":1}', b'{"v":1}'])
