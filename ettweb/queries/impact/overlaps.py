"""Other rollouts that may share a rollout's measured change (ETT_SPEC §6.4).

A rollout to the same component whose scope can hold the same jobs, inside either window,
moves the same number: the page names it beside the verdict instead of pretending to split
the change between them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ettweb.queries.impact.result import Overlap, RolloutInfo
from ettweb.queries.impact.windows import Windows, utc_day
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import Scope
from ettweb.rollups.models import JobRollup


def _labels_meet(a: Scope, b: Scope) -> bool:
    """Whether two scopes' label lists leave a job both could hold (a field both name must
    share a value)."""
    for name in ("models", "teams", "clusters"):
        left, right = getattr(a, name), getattr(b, name)
        if left is not None and right is not None and not set(left) & set(right):
            return False
    return True


def scopes_overlap(a: Scope, b: Scope) -> bool:
    """Whether some job is in both scopes. Label lists decide alone; with a job pattern,
    the jobs ETT knows decide (two globs' overlap is not worth guessing)."""
    if not _labels_meet(a, b):
        return False
    if a.job_pattern is None and b.job_pattern is None:
        return True
    lists = dict(a.label_lists())
    for label, values in b.label_lists():
        lists[label] = tuple(set(values) & set(lists[label])) if label in lists else values
    rows = JobRollup.objects.filter(**{f"{label}__in": list(values)
                                       for label, values in lists.items()})
    return any(a.matches(*row) and b.matches(*row)
               for row in rows.values_list("job", "model", "team", "cluster").iterator())


def overlapping(info: RolloutInfo, windows: Windows, window_days: int) -> list[Overlap]:
    """ETT_SPEC §6.4: other rollouts to the same component, scopes overlapping, whose
    moment falls inside either window (the whole ``after`` window, data or not; the
    rollout's own day is in neither)."""
    first, last = windows.before[0], windows.rollout_day + timedelta(days=window_days)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    others = (Rollout.objects.filter(component=info.component, at__gte=start, at__lt=end)
              .exclude(pk=info.id).order_by("at", "id"))
    return [Overlap(other.pk, other.name, other.at) for other in others
            if utc_day(other.at) != windows.rollout_day
            and scopes_overlap(info.scope, other.parsed_scope)]
