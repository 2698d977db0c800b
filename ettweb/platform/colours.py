"""The one colour per category and per owning component, for every chart ETT draws.

A reader learns "blue is checkpointing" on one page and reads it on the next, so the colour
of a name never depends on the chart, its position or a hash that two names can share
(``checkpoint_load``, ``data_init`` and ``sharding_plan`` once hashed into one slot). The
dashboard's plotly figures and the weekly e-mail's matplotlib chart both take colours from
:func:`colour_of`. No plotly and no Django here: the e-mail worker imports it too.

Each component has a hue; its categories are shades of that hue (``checkpoint_save`` dark
blue, ``checkpoint_load`` light blue), so a timeline reads by owner first, phase second.
"""

from __future__ import annotations

import zlib
from typing import Final

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS, PRODUCTIVE

#: Every known category: ETT_SPEC §4's phases and the engine's own categories.
CATEGORY_COLOURS: Final[dict[str, str]] = {
    PRODUCTIVE: "#2e9e5b",
    "repeated_training": "#e8912d",
    "failure": "#d1453b",
    "restart_gap": "#9aa3ad",
    "unattributed": "#cfd4da",
    "scheduling": "#5f6b77",
    "container_start": "#8c564b",
    "shutdown": "#c49c94",
    "launch": "#5e3a31",
    "rendezvous": "#eeca3b",
    "process_group_init": "#b8930c",
    "model_init": "#17becf",
    "sharding_plan": "#0e7c86",
    "data_init": "#9467bd",
    "compile": "#e377c2",
    "checkpoint_save": "#1f77b4",
    "checkpoint_load": "#aec7e8",
    "eval": "#3b3eac",
    "publish": "#7b1e3b",
}
#: Owning components: the hue of their categories, so one owner looks the same everywhere.
COMPONENT_COLOURS: Final[dict[str, str]] = {
    "scheduler": "#5f6b77",
    "cluster_runtime": "#8c564b",
    "distributed_runtime": "#eeca3b",
    "trainer_init": "#17becf",
    "data_ingestion": "#9467bd",
    "pt2_compiler": "#e377c2",
    "checkpointing": "#1f77b4",
    "evaluation": "#3b3eac",
    "model_publishing": "#7b1e3b",
    "reliability": "#d1453b",
    "unknown": "#cfd4da",
}
#: Names nobody has given a colour (an owner's custom phase): hashed into these, which no
#: known name uses, so a custom phase never passes for a known one.
PALETTE: Final = ("#79706e", "#bab0ac", "#637939", "#843c39", "#7b4173", "#393b79",
                  "#8ca252", "#bd9e39", "#ad494a", "#a55194")
#: The categories a legend lists first, in this order: what people look for first.
LEADING_CATEGORIES: Final = (PRODUCTIVE, "repeated_training", "failure", "restart_gap")


def colour_of(name: str) -> str:
    """The colour of a category or a component: fixed for known names, hashed otherwise
    (never by position, so a name keeps its colour from page to page)."""
    fixed = CATEGORY_COLOURS.get(name) or COMPONENT_COLOURS.get(name)
    return fixed or PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def category_order(category: str) -> tuple[int, int, str]:
    """Sort key for legends: the leading categories, then the phases in the order of the
    phase map (grouped by owner, like their colours), then unknown names by name."""
    if category in LEADING_CATEGORIES:
        return (0, LEADING_CATEGORIES.index(category), category)
    phases = list(DEFAULT_PHASE_COMPONENTS)
    if category in phases:
        return (1, phases.index(category), category)
    return (2, 0, category)


def ink_on(colour: str) -> str:
    """Text colour readable on a ``#rrggbb`` background: dark on light colours (gold,
    light grey), white on the rest — a number on a marker must stay legible."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    light = 0.299 * red + 0.587 * green + 0.114 * blue > 160
    return "#1d2630" if light else "#ffffff"
