"""The ``recovery`` switch: a checkpoint interval from the Young/Daly formula.

Why: checkpointing too rarely makes every failure retrain many steps (``repeated_training``);
too often pays the checkpoint cost over and over. Young's first-order optimum is
τ = √(2δM) for a blocking checkpoint cost δ and a mean time between failures M; Daly's
higher-order form (used here) is τ = √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] - δ for δ < 2M, else M.
δ is *measured* (the blocking time of the last save, the slowest rank's), M is configured
(``--mtbf``). With asynchronous saves δ is only the staging time, so τ is kept above the
background write time: a save never waits for the one before.
"""

from __future__ import annotations

import math


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young (1974): τ = √(2δM)."""
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly (2006): the compute time between checkpoints that minimizes expected wall time."""
    if cost_s <= 0:
        return 0.0
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost_s


def interval_steps(cost_s: float, mtbf_s: float, step_s: float, *,
                   background_s: float = 0.0, at_least: int = 1) -> int:
    """Daly's interval in training steps of ``step_s`` seconds, never below the background
    write time nor ``at_least`` steps."""
    seconds = max(daly_interval_s(cost_s, mtbf_s), background_s)
    if step_s <= 0:
        return at_least
    return max(at_least, round(seconds / step_s))
