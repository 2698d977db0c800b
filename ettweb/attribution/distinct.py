"""Whether a fleet's event ids are all distinct, proved on their hashes.

Why: the engine drops repeated ids, and proving there are none is most of what it does
before attributing. A set of a million ids costs more than sorting their hashes: distinct
hashes prove distinct ids; equal ones (a repeat, or a rare collision) send the caller to
its exact path, which finds the repeats, if any, id by id.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np


def hashes_distinct(ids: Iterable[Hashable], count: int) -> bool:
    """Whether the ``count`` ``ids`` have distinct hashes (then the ids are distinct)."""
    hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=count)
    hashes.sort()
    return not bool(np.any(hashes[1:] == hashes[:-1]))
