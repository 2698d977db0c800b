"""Which components exist: the ones in the phase→component map plus the ones owners added."""

from __future__ import annotations

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS, PRODUCTIVE
from ettweb.components.models import Component
from ettweb.rollups.models import PhaseComponent


def known_components() -> list[str]:
    """Every component a rollout may name, sorted (never ``productive``: it owns no loss).

    The map's components (edited, else ETT_SPEC §4's defaults when the table is empty) and
    every :class:`Component` row.
    """
    mapped = set(PhaseComponent.objects.values_list("component", flat=True))
    if not mapped:
        mapped = set(DEFAULT_PHASE_COMPONENTS.values())
    names = mapped | set(Component.objects.values_list("name", flat=True))
    names.discard(PRODUCTIVE)
    return sorted(names)
