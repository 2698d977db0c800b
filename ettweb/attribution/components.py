"""Which component owns each category of lost time (ETT_SPEC §4).

Lost time is only actionable when someone owns it, so every category maps to exactly one
component; owners may edit the map, hence ``component_of`` takes an optional override.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: The category of new training steps; it is never lost time and has no owning component.
PRODUCTIVE: Final = "productive"
#: Where unmapped phases and ``unattributed`` land, so gaps in the map stay visible.
UNKNOWN_COMPONENT: Final = "unknown"

DEFAULT_PHASE_COMPONENTS: Final[dict[str, str]] = {
    "scheduling": "scheduler",
    "restart_gap": "scheduler",
    "container_start": "cluster_runtime",
    "shutdown": "cluster_runtime",
    # ETT's addition to ETT_SPEC §4: from an attempt's processes starting to the job's own
    # first event, as ``python -m collector.run`` sees it from outside.
    "launch": "cluster_runtime",
    "rendezvous": "distributed_runtime",
    "process_group_init": "distributed_runtime",
    "model_init": "trainer_init",
    "sharding_plan": "trainer_init",
    "data_init": "data_ingestion",
    "compile": "pt2_compiler",
    "checkpoint_save": "checkpointing",
    "checkpoint_load": "checkpointing",
    "eval": "evaluation",
    "publish": "model_publishing",
    "failure": "reliability",
    "repeated_training": "reliability",
    "unattributed": UNKNOWN_COMPONENT,
}


def component_of(category: str, mapping: Mapping[str, str] | None = None) -> str:
    """Return the component owning ``category``; anything unmapped is ``unknown``.

    ``mapping`` replaces the defaults entirely (owners edit the whole map, not a diff), and
    ``productive`` maps to itself so callers can group every category without a special case.
    """
    if category == PRODUCTIVE:
        return PRODUCTIVE
    table = DEFAULT_PHASE_COMPONENTS if mapping is None else mapping
    return table.get(category, UNKNOWN_COMPONENT)
