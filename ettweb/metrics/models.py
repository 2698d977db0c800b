"""The highest value each exported counter has shown, so a counter never goes down."""

from __future__ import annotations

from django.db import models


class CounterFloor(models.Model):
    """One exported counter series (name and labels) and the largest value it has shown.

    Why: a Prometheus counter that decreases reads as a reset, and ``rate()`` then counts the
    whole value again, a spike of the fleet's entire history. Rollup totals almost always only
    grow, but a correction can lower one (a late ``attempt_start`` that cuts an earlier
    attempt's window, a quarantine pruned). ``/metrics`` shows ``max(floor, current)``; the
    floor rises with the data and a correction downwards is absorbed until the data catches up.
    """

    series = models.CharField(max_length=512, unique=True)
    value = models.FloatField()

    def __str__(self) -> str:
        return f"{self.series} {self.value}"
