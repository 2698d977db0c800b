"""ETT collector: the Reporter library trainers call, and the per-node agent that ships events.

Imports neither Django nor torch: it runs on training nodes.
"""

from collector.reporter import Reporter, attempt_from_env
from collector.spans import PhaseSpan, TrainTracker, traced

__all__ = ["PhaseSpan", "Reporter", "TrainTracker", "attempt_from_env", "traced"]
