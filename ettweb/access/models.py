"""Which components a user owns (the owner role acts on these, and only on these).

The component is its name, not a key to ``components.Component``: a component may exist only
in the phase→component map (no row there), and an owner of it must still be recordable.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ComponentOwner(models.Model):
    """``user`` owns ``component``: with the ``owner`` role they edit its rollouts, its owner
    team and the categories the phase map gives it, its pages and the API list them as its
    owners, and their weekly report lists it first by default."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="owned_components")
    component = models.CharField(max_length=64, help_text="a component name, e.g. checkpointing")

    class Meta:
        ordering = ["component", "user"]
        constraints = [models.UniqueConstraint(fields=["user", "component"],
                                               name="component_owner_once")]

    def __str__(self) -> str:
        return f"{self.user} owns {self.component}"
