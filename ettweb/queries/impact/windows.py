"""Where a rollout's two windows fall (ETT_SPEC §6): whole UTC days around its moment.

The rollout's own day belongs to neither window, because on it some jobs ran before the
change and some after; ``before`` is the W days ending the day before, ``after`` the W days
starting the day after. An ``after`` that reaches past the last day holding data is
``partial`` and is measured over the days it has, so a recent rollout shows an early answer
rather than none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db.models import Max

from ettweb.rollups.models import DailyCategoryRollup


@dataclass(frozen=True)
class Windows:
    """The rollout's day and its two windows (inclusive UTC days); ``after`` is None when
    no day of it holds data yet."""

    rollout_day: date
    before: tuple[date, date]
    after: tuple[date, date] | None
    partial: bool

    @property
    def after_days(self) -> int:
        return 0 if self.after is None else (self.after[1] - self.after[0]).days + 1


def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def last_data_day() -> date | None:
    """The last UTC day holding any per-day row: where an ``after`` window is cut."""
    day: date | None = DailyCategoryRollup.objects.aggregate(last=Max("day"))["last"]
    return day


def rollout_windows(at: datetime, window_days: int, last_day: date | None) -> Windows:
    """§6's windows around ``at``; ``after`` cut at ``last_day`` (then ``partial``)."""
    day = utc_day(at)
    before = (day - timedelta(days=window_days), day - timedelta(days=1))
    after_start, after_end = day + timedelta(days=1), day + timedelta(days=window_days)
    if last_day is None or last_day < after_start:
        return Windows(day, before, None, partial=True)
    if last_day < after_end:
        return Windows(day, before, (after_start, last_day), partial=True)
    return Windows(day, before, (after_start, after_end), partial=False)
