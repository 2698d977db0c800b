"""The ``recovery`` switch: a checkpoint interval from the Young/Daly formula.

Why: checkpointing too rarely makes every failure retrain many steps (``repeated_training``);
too often pays the checkpoint cost over and over. Young's first-order optimum is
τ = √(2δM) for a blocking checkpoint cost δ and a mean time between failures M; Daly's
higher-order form (used here) is τ = √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] - δ for δ < 2M, else M.
δ is *measured* (the blocking time of the last save, the slowest rank's), M is configured
(``--mtbf``). With asynchronous saves δ is only the staging time, so τ is kept above the
background write time: a save never waits for the one before.

Before the first save there is no measured δ: the first checkpoint is then taken early
(:data:`PROBE_STEPS` steps in) to measure it. The measurement is kept beside the checkpoints
(:data:`MEASURED_FILE`), so a restarted attempt uses Young/Daly's interval from its first step.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path


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


#: With ``recovery`` and no measured cost yet, the first checkpoint comes this many steps into
#: the job: Young/Daly needs the cost of a save, and a fixed interval until the first one would
#: leave the job's first failure as exposed as without the switch.
PROBE_STEPS = 100
MEASURED_FILE = "recovery.json"


@dataclass(frozen=True)
class Measured:
    """What a save cost, and the step time then: the inputs of the interval (slowest rank's).

    ``interference_s`` is the training time an asynchronous save costs *while* it writes:
    on a host where the write shares the cores (and the GIL) with training, steps run
    slower meanwhile. Counting only the blocked time would make δ look tiny and Young/Daly
    checkpoint so often that training is slowed all the time (measured on 2 cores: 55 saves
    in one run of the default plan, ~400 steps apart, 123 s of background writing), time that
    ETT would count as productive.
    """

    cost_s: float
    step_s: float
    background_s: float = 0.0
    interference_s: float = 0.0

    @property
    def effective_cost_s(self) -> float:
        return self.cost_s + self.interference_s

    def interval_steps(self, mtbf_s: float) -> int:
        return interval_steps(self.effective_cost_s, mtbf_s, self.step_s,
                              background_s=self.background_s)


def interference_s(background_s: float, step_s: float, writing_step_s: float | None) -> float:
    """Training time lost to a background write of ``background_s``: the steps it overlapped
    (``background_s / writing_step_s`` of them) each took ``writing_step_s - step_s`` longer.
    Zero when no step overlapped a write or they were not slower."""
    if not writing_step_s or writing_step_s <= step_s or background_s <= 0:
        return 0.0
    return background_s * (1.0 - step_s / writing_step_s)


def save_measured(directory: Path, measured: Measured) -> None:
    """Keep the last measurement beside the checkpoints, so a restarted attempt starts with
    Young/Daly's interval instead of probing again (written atomically: temp file + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{MEASURED_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(measured)))
    tmp.replace(directory / MEASURED_FILE)


def load_measured(directory: Path) -> Measured | None:
    """The kept measurement, or None when there is none (or it is unreadable: probe again)."""
    try:
        raw = json.loads((directory / MEASURED_FILE).read_text())
        measured = Measured(float(raw["cost_s"]), float(raw["step_s"]),
                            float(raw.get("background_s", 0.0)),
                            float(raw.get("interference_s", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    values = (measured.cost_s, measured.step_s, measured.background_s, measured.interference_s)
    if not all(math.isfinite(v) and v >= 0 for v in values) or measured.step_s == 0:
        return None
    return measured
