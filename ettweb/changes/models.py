"""A detected level shift in one component's daily lost share (ETT_SPEC §6.3).

Stored, not computed per request: detection reads a year of rollups for every component,
for the fleet and each team, which is beat's work (``ett.detect_changes``, hourly), not a
page load's. Which rollout a change belongs to is *not* stored: it is matched when read
(``ettweb.queries.changes``), so a rollout recorded after the change was found matches it at
once, and an edited or deleted rollout lets go of it.
"""

from __future__ import annotations

from django.db import models


class Change(models.Model):
    """One level shift: ``day`` is the first UTC day at the new level; the lost shares are
    the means of the days either side, in points of that group's wall time."""

    component = models.CharField(max_length=64)
    team = models.CharField(max_length=200, null=True, blank=True,
                            help_text="the team whose jobs' share moved; empty: the fleet's")
    day = models.DateField(help_text="first UTC day at the new level")
    before_lost_pct = models.FloatField()
    after_lost_pct = models.FloatField()
    detected_at = models.DateTimeField(help_text="when detection first found it")

    class Meta:
        ordering = ["-day", "component", "team"]
        indexes = [models.Index(fields=["day"], name="change_day"),
                   models.Index(fields=["component", "day"], name="change_component_day")]

    def __str__(self) -> str:
        return f"{self.component} ({self.team or 'fleet'}) {self.day}: {self.change_pts:+.2f} pts"

    @property
    def change_pts(self) -> float:
        return self.after_lost_pct - self.before_lost_pct
