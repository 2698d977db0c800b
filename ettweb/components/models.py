"""An owning component and the team that owns it.

The phase→component map (``rollups.PhaseComponent``) says which categories a component owns;
this table says who the component belongs to, so a component page can name the team to talk
to. A component named in the map but missing here is still a component (it shows with no
owner); adding a row here adds a component that rollouts may name before any phase maps to it.
"""

from __future__ import annotations

from django.db import models


class Component(models.Model):
    """An owning component (``pt2_compiler``, ``checkpointing`` ...) and its owner team."""

    name = models.CharField(max_length=64, unique=True)
    owner_team = models.CharField(max_length=200, blank=True, default="",
                                  help_text="the team that owns this component")
    description = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
