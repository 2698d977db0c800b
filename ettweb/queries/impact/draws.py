"""A rollout's bootstrap draws, computed once and kept: in this process and in the database.

The draws are the expensive part of an impact and a pure function of the seed and the two
groups' per-job sums, so every reader of the same rollout over unchanged rollups (the page,
the API, the component page, the weekly report) can share one bootstrap; see
:func:`group_draws` for how they are keyed, and why only the worker stores them.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import numpy as np

from ettweb.rollouts.models import BootstrapDraws
from ettweb.statistics import estimators
from ettweb.statistics.estimators import Group


@dataclass(frozen=True)
class Draws:
    """One impact's bootstrap draws: the treated and control groups' (B, 2) ETT% and
    component changes (§6, §6.1) and the adjusted estimate's (B, 3) (§6.2); None where a
    group has too few jobs."""

    treated: np.ndarray | None
    control: np.ndarray | None
    adjusted: np.ndarray | None


@dataclass(frozen=True)
class _Kept:
    """Draws this process holds, and whether :class:`BootstrapDraws` holds them too."""

    draws: Draws
    stored: bool


#: Bootstrap draws already computed, by their inputs (see :func:`group_draws`).
_DRAWS: OrderedDict[str, _Kept] = OrderedDict()
_DRAWS_KEPT: Final = 256
_DRAWS_LOCK = threading.Lock()
#: Part of every digest: a new layout of the stored draws never reads an old one.
_DRAWS_LAYOUT: Final = b"draws-v2"


#: Significant digits of the per-job sums a digest tells apart (see :func:`_significant`).
DIGEST_DIGITS: Final = 9


def _significant(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` to ``DIGEST_DIGITS`` significant digits, exactly: (mantissa, exponent)
    integer arrays with value ~= mantissa x 10^exponent.

    Why: Postgres adds a job's rows in whatever order its plan meets them, and a plan can
    change (another join, new statistics), so the same rollups can give sums a last bit
    apart: they differ in the 16th digit, the digest keeps 9, and a changed rollup moves a
    sum far more than that.
    """
    magnitude = np.abs(values)
    exponent = np.zeros(values.shape, dtype=np.int64)
    nonzero = magnitude > 0
    exponent[nonzero] = np.floor(np.log10(magnitude[nonzero])).astype(np.int64) - (
        DIGEST_DIGITS - 1)
    mantissa = np.rint(values / np.power(10.0, exponent)).astype(np.int64)
    return mantissa, exponent


def _digest(group: Group | None) -> bytes | None:
    if group is None:
        return None
    h = hashlib.blake2b(digest_size=16)
    for array in (*_significant(group.values), group.in_before, group.in_after, group.gpus):
        h.update(np.ascontiguousarray(array).tobytes())
        h.update(b"|")
    return h.digest()


def _draws_key(seed: int, treated: Group, control: Group | None) -> str:
    """The digest the draws of these inputs are kept under (process memory and table)."""
    h = hashlib.blake2b(digest_size=32)
    h.update(_DRAWS_LAYOUT)
    h.update(str(seed).encode())
    h.update(_digest(treated) or b"")
    h.update(_digest(control) or b"-")
    return h.hexdigest()


def _as_array(cell: bytes | memoryview | None, width: int) -> np.ndarray | None:
    if cell is None:
        return None
    return np.frombuffer(bytes(cell), dtype=np.float64).reshape(-1, width)


def _as_cell(draws: np.ndarray | None) -> bytes | None:
    return None if draws is None else np.ascontiguousarray(draws, dtype=np.float64).tobytes()


#: A stored row read after this long since it was marked used is marked again (one write a
#: day at most, so the warm pass's pruning keeps whatever is still read).
_MARK_USED_AFTER: Final = timedelta(days=1)


def _stored_draws(key: str) -> tuple[Draws, datetime] | None:
    """The draws stored under ``key`` and when they were last marked used."""
    row = (BootstrapDraws.objects.filter(key=key)
           .values_list("treated", "control", "adjusted", "used_at").first())
    if row is None:
        return None
    return Draws(_as_array(row[0], 2), _as_array(row[1], 2), _as_array(row[2], 3)), row[3]


def _store_draws(key: str, draws: Draws) -> None:
    """Keep ``draws`` under ``key``; a concurrent worker storing the same key wins, harmlessly
    (both computed the same draws from the same seed and inputs)."""
    BootstrapDraws.objects.bulk_create(
        [BootstrapDraws(key=key, treated=_as_cell(draws.treated),
                        control=_as_cell(draws.control), adjusted=_as_cell(draws.adjusted),
                        used_at=datetime.now(UTC))], ignore_conflicts=True)


def _remember(key: str, kept: _Kept) -> None:
    with _DRAWS_LOCK:
        _DRAWS[key] = kept
        _DRAWS.move_to_end(key)
        while len(_DRAWS) > _DRAWS_KEPT:
            _DRAWS.popitem(last=False)


def compute_draws(seed: int, treated: Group, control: Group | None) -> Draws:
    """The impact's draws (:func:`estimators.impact_draws`)."""
    return Draws(*estimators.impact_draws(seed, treated, control))


def group_draws(seed: int, treated: Group, control: Group | None, *,
                keep: bool = False) -> tuple[Draws, bool]:
    """The impact's draws (:func:`compute_draws`) for these groups, and whether they still
    need keeping: not stored yet, or stored but not marked used for a day.

    The draws are a pure function of the seed and the two groups' per-job sums, so they are
    kept by a digest of exactly those: in this process (the last ``_DRAWS_KEPT``) and in
    :class:`BootstrapDraws` for every process. A page, the API, the component page and the
    weekly report asking for the same rollout over unchanged rollups reuse one bootstrap,
    while any changed sum, job or window gives a new digest and a new bootstrap. The rollups
    are still read on every call; only the arithmetic is shared.

    Only ``keep`` (the worker: the warm pass, or a warm a page asked for) stores draws and
    marks them used. A read computes missing draws in memory and leaves the keeping to the
    worker, because a GET never writes; the numbers are the same either way.
    """
    key = _draws_key(seed, treated, control)
    with _DRAWS_LOCK:
        kept = _DRAWS.get(key)
        if kept is not None:
            _DRAWS.move_to_end(key)
    if kept is not None and kept.stored:
        return kept.draws, False
    found = _stored_draws(key)
    if found is not None:
        draws, used_at = found
        unmarked = used_at < datetime.now(UTC) - _MARK_USED_AFTER
        if unmarked and keep:
            BootstrapDraws.objects.filter(key=key).update(used_at=datetime.now(UTC))
        _remember(key, _Kept(draws, stored=True))
        return draws, unmarked and not keep
    draws = kept.draws if kept is not None else compute_draws(seed, treated, control)
    if keep:
        _store_draws(key, draws)
    _remember(key, _Kept(draws, stored=keep))
    return draws, not keep
