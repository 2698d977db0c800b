"""A rollout: one change to one component, deployed at one moment, to a scope (ETT_SPEC §6).

Impact is never stored: it is computed from the rollups on every request
(``ettweb.queries.impact``), so late events, a re-attributed job or an edited component map
show in the next answer and a stored number can never go stale. What is stored is the
bootstrap's arithmetic (:class:`BootstrapDraws`), kept by a digest of exactly its inputs.
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


class BootstrapDraws(models.Model):
    """One impact's bootstrap draws (ETT_SPEC §6 and §6.1: B changes of the treated group, and
    of the control; §6.2: B adjusted changes), kept under a digest of everything they are a
    function of: the seed (the rollout's id) and both groups' per-job window sums.

    Why stored: 2,000 draws over 10,000 jobs cost ~300 ms of CPU, most of a rollout page's
    first load at fleet scale, while the inputs of a past rollout's windows never change.
    Any changed sum, job or window gives another digest, so a stored row is never stale,
    only unused; ``ettweb.rollouts.warm`` computes the page's standard windows ahead and
    prunes rows nobody used for a week.
    """

    key = models.CharField(max_length=64, unique=True, help_text="hex digest of the inputs")
    treated = models.BinaryField(null=True, help_text="float64 (draws, 2): the ETT% and the "
                                                      "component's changes; null: too few jobs")
    control = models.BinaryField(null=True)
    adjusted = models.BinaryField(null=True, help_text="float64 (draws, 3): the adjusted "
                                                       "treated, control and DiD changes")
    used_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["used_at"], name="bootstrapdraws_used")]

    def __str__(self) -> str:
        return f"draws {self.key[:12]}…"


class ImpactSummary(models.Model):
    """The headline of one rollout's impact at one window, as the warm pass last computed
    it: what ``/rollouts/`` lists, sorts and filters by without computing fourteen impacts
    per request. The rollout's page never reads it (it computes the impact itself), so a
    summary older than the rollups shows only in the list, with its ``computed_at``."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="summaries")
    window_days = models.PositiveSmallIntegerField()
    computed_at = models.DateTimeField()
    partial = models.BooleanField(default=False)
    verdict = models.CharField(max_length=16, help_text="§6's unadjusted ETT% verdict")
    component_verdict = models.CharField(max_length=16)
    component_change_pts = models.FloatField(null=True)
    component_ci_low = models.FloatField(null=True)
    component_ci_high = models.FloatField(null=True)
    adjusted_verdict = models.CharField(max_length=16)
    adjusted_change_pts = models.FloatField(null=True)
    adjusted_ci_low = models.FloatField(null=True)
    adjusted_ci_high = models.FloatField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rollout", "window_days"],
                                               name="impactsummary_rollout_window")]

    def __str__(self) -> str:
        return f"{self.rollout_id} at {self.window_days} d: {self.adjusted_verdict}"
