"""An owning component and the team that owns it.

The phase→component map (``rollups.PhaseComponent``) says which categories a component owns;
this table names the team a component belongs to, so a component page can say whom to talk
to. That label grants nothing: who may edit a component, is listed as its owner and gets its
report by default is the owner role's (``access.ComponentOwner``). A component named in the
map but missing here is still a component (it shows with no owner team); adding a row here
adds a component that rollouts may name before any phase maps to it.
"""

from __future__ import annotations

from django.conf import settings
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


class PhaseMove(models.Model):
    """One change of the phase map: a category moved from one component to another, by
    whom and when. Why kept: a move recharges history on every page (rollups keep
    categories), so an owner seeing their component's numbers jump can see who moved what."""

    category = models.CharField(max_length=64)
    from_component = models.CharField(max_length=64)
    to_component = models.CharField(max_length=64)
    moved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    moved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-moved_at", "-id"]
        indexes = [models.Index(fields=["from_component"], name="phasemove_from"),
                   models.Index(fields=["to_component"], name="phasemove_to")]

    def __str__(self) -> str:
        return f"{self.category}: {self.from_component} → {self.to_component}"
