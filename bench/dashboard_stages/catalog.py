"""What the bench's database holds, as values to fill request parameters with.

Why from the database: a page asked for a job, a rollout or a team that does not exist
answers fast and empty, and would time nothing. Parameters are filled by name with job ids,
rollout ids, component names, models, teams, clusters, collector sources, days and ISO weeks
that hold data, and ranges of realistic lengths.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

#: Range lengths (days) the requests draw from: a day, a week, the default month, a quarter…
RANGE_DAYS: Final = (1, 7, 14, 30, 30, 30, 60, 90, 180)


@dataclass(frozen=True)
class Catalog:
    """What the database holds, to fill parameters with values that exist."""

    jobs: tuple[str, ...]
    biggest_job: str
    rollouts: tuple[tuple[int, float], ...]  # (id, epoch at), in time order
    components: tuple[str, ...]
    models: tuple[str, ...]
    teams: tuple[str, ...]
    clusters: tuple[str, ...]
    sources: tuple[str, ...]
    first_day: date
    last_day: date
    unsubscribe_token: str

    @property
    def weeks(self) -> list[str]:
        """ISO weeks whose seven days all hold data, oldest first."""
        from ettweb.queries import IsoWeek

        weeks, day = [], self.first_day + timedelta(days=(7 - self.first_day.weekday()) % 7)
        while day + timedelta(days=6) <= self.last_day:
            weeks.append(str(IsoWeek.of(day)))
            day += timedelta(days=7)
        return weeks or [str(IsoWeek.of(self.last_day))]

    def last_range(self, days: int) -> tuple[date, date]:
        return max(self.first_day, self.last_day - timedelta(days=days - 1)), self.last_day


def load_catalog(user: Any) -> Catalog:
    from django.db.models import Max, Min

    from ettweb.components.known import known_components
    from ettweb.ingest.models import CollectorHealth, Job
    from ettweb.reports.models import Subscription
    from ettweb.reports.unsubscribe import make_token
    from ettweb.rollouts.models import Rollout
    from ettweb.rollups.models import DailyCategoryRollup, JobRollup

    days = DailyCategoryRollup.objects.aggregate(lo=Min("day"), hi=Max("day"))
    today = datetime.now(UTC).date()
    jobs = list(JobRollup.objects.order_by("job").values_list("job", flat=True))
    biggest = JobRollup.objects.order_by("-events", "job").values_list("job", flat=True).first()
    subscription, _ = Subscription.objects.get_or_create(
        user=user, defaults={"email": "bench@example.com"})
    return Catalog(
        jobs=tuple(jobs[::max(1, len(jobs) // 2000)]), biggest_job=biggest or "",
        rollouts=tuple((pk, at.timestamp()) for pk, at in
                       Rollout.objects.order_by("at").values_list("pk", "at")),
        components=tuple(known_components()),
        models=_distinct(Job, "model"), teams=_distinct(Job, "team"),
        clusters=_distinct(Job, "cluster"),
        sources=tuple(CollectorHealth.objects.values_list("source", flat=True)),
        first_day=days["lo"] or today, last_day=days["hi"] or today,
        unsubscribe_token=make_token(subscription.pk))


def _distinct(model: Any, column: str) -> tuple[str, ...]:
    values = model.objects.exclude(**{column: ""}).values_list(column, flat=True).distinct()
    return tuple(sorted(values))


class Filler:
    """Realistic values for parameters, by name, drawn from the catalog.

    ``value`` answers None for a name it does not know: the caller then falls back on what
    the page's form offers, or leaves an optional parameter out.
    """

    def __init__(self, catalog: Catalog) -> None:
        from ettweb.queries import GPU_BUCKETS, GROUPINGS, INTERVALS
        from ettweb.queries.job_list import SORTS, STATUSES

        c = catalog
        job_bits = [j.rsplit("-", 1)[-1][:3] for j in c.jobs[:50]] + list(c.models)
        self.catalog = c
        self.choices: dict[str, Sequence[Any]] = {
            "model": c.models, "team": c.teams, "cluster": c.clusters,
            "component": c.components, "source": c.sources, "job": c.jobs,
            "gpus": [label for _, _, label in GPU_BUCKETS], "status": STATUSES,
            "sort": [f"{sign}{key}" for key in SORTS for sign in ("-", "")],
            "interval": INTERVALS, "group_by": GROUPINGS, "week": c.weeks,
            # Page 1 only: a page past the last is a 400, and a random filter may leave one
            # page; the sort over every matching job, not the offset, is what costs.
            "page": (1,), "page_size": (25, 50, 100, 200),
            "top": (5, 10, 20, 50), "limit": (20, 100, 500), "rejected": (10, 50, 200),
            "window": (7, 14, 14, 28, 60, 90), "silent_after": (1, 5, 5, 60, 1440),
            "silent_after_s": (60, 300, 300, 3600), "q": job_bits, "days": (7, 30, 90),
        }

    def value(self, name: str, rng: random.Random) -> str | None:
        if name == "components":
            return ",".join(rng.sample(self.catalog.components,
                                       min(2, len(self.catalog.components))))
        values = self.choices.get(name)
        if not values:
            return None
        return str(rng.choice(values))

    def date_range(self, rng: random.Random) -> tuple[str, str]:
        """A range that holds data: a realistic length ending on a random data day."""
        c = self.catalog
        span = (c.last_day - c.first_day).days + 1
        length = min(span, rng.choice(RANGE_DAYS))
        end = c.last_day - timedelta(days=rng.randint(0, span - length))
        return (end - timedelta(days=length - 1)).isoformat(), end.isoformat()

    def day(self, rng: random.Random) -> str:
        c = self.catalog
        return (c.first_day + timedelta(days=rng.randint(0, (c.last_day - c.first_day).days))
                ).isoformat()

    def path_value(self, route: str, name: str, rng: random.Random) -> str | None:
        """A path parameter's value: known by its name, or by the route it sits in."""
        c = self.catalog
        if name in ("job", "job_id") and c.jobs:
            return rng.choice(c.jobs)
        if c.rollouts and (name == "rollout_id" or ("rollout" in route and name in ("id", "pk"))):
            return str(rng.choice(c.rollouts)[0])
        if name in ("name", "component") and "component" in route and c.components:
            return rng.choice(c.components)
        if name == "token" and "unsubscribe" in route:
            return c.unsubscribe_token
        if name in self.choices and name not in ("page", "page_size"):
            return self.value(name, rng)
        return None
