"""A rollout: one change to one component, deployed at one moment, to a scope (ETT_SPEC §6).

Impact is never stored: it is computed from the rollups on every request
(``ettweb.queries.impact``), so late events, a re-attributed job or an edited component map
show in the next answer and a stored number can never go stale.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from ettweb.rollouts.scope import Scope, parse_scope


class Rollout(models.Model):
    """One optimization rollout; ``scope`` is the JSON form :func:`parse_scope` accepts."""

    name = models.CharField(max_length=200)
    component = models.CharField(max_length=64, help_text="owning component it changes, e.g. "
                                                          "checkpointing")
    at = models.DateTimeField(help_text="when it was deployed (UTC)")
    scope = models.JSONField(default=dict, blank=True,
                             help_text='{} for the fleet, or any of "models", "teams", '
                                       '"clusters" (lists) and "job_pattern" (a glob)')
    notes = models.TextField(blank=True, default="")
    link = models.URLField(max_length=500, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="rollouts")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    simulated = models.BooleanField(default=False,
                                    help_text="written by manage.py simulate_fleet "
                                              "(its --clear removes it)")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["at"], name="rollout_at"),
                   models.Index(fields=["component", "at"], name="rollout_component_at")]

    def __str__(self) -> str:
        return f"{self.name} ({self.component}, {self.at:%Y-%m-%d})"

    @property
    def parsed_scope(self) -> Scope:
        """The validated scope (stored scopes were validated on the way in)."""
        return parse_scope(self.scope)
