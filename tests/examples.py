"""How many examples a Hypothesis test draws: all of them in ``make test``, fewer in the loop.

``make test`` (and CI) draw every example each test asks for. ``make test-fast``, the loop a
developer runs after each edit, sets ``ETT_TEST_EXAMPLES`` to a fraction, so the property
tests still run every property on fresh examples without dominating the loop; the whole
suite keeps the full count, so nothing is checked less before a change lands.
"""

from __future__ import annotations

import os

#: The fewest examples a scaled test draws: enough to exercise every strategy's branches.
FLOOR = 20


def _scale() -> float:
    text = os.environ.get("ETT_TEST_EXAMPLES", "1")
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"ETT_TEST_EXAMPLES must be a fraction in (0, 1], not {text!r}") \
            from None
    if not 0 < scale <= 1:
        raise ValueError(f"ETT_TEST_EXAMPLES must be a fraction in (0, 1], not {text!r}")
    return scale


SCALE = _scale()


def examples(count: int) -> int:
    """``count`` examples in the whole suite; the loop's fraction of them, at least FLOOR."""
    return count if SCALE == 1 else max(min(FLOOR, count), round(count * SCALE))
