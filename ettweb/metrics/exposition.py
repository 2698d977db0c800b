"""The fleet's totals as Prometheus metric families, with counters held monotonic.

Names are in base units (seconds) and end in ``_total`` where they are counters, as the
Prometheus naming guide asks; labels are team, cluster and component only (never a job, which
would make a series per job and per day of the fleet's history).

A counter shows its stored floor (:class:`ettweb.metrics.models.CounterFloor`), which the
worker raises to the current total every :data:`ettweb.platform.schedule.BEAT_SCHEDULE`
``raise-counter-floors`` period (:func:`raise_floors`), never the scrape: a GET never writes,
and a counter that showed a total no floor holds could go down on the next scrape. So the
counters trail the rollups by up to that period, and a series appears once a pass has seen it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import connection
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ettweb.metrics.models import CounterFloor
from ettweb.queries import FleetTotalsResult

SCOPE = ("team", "cluster")


def render(result: FleetTotalsResult) -> bytes:
    """The text exposition format of ``result``: its gauges, and its counters' series at
    their stored floors (a series no pass has raised yet is left out)."""
    counters = _counters(result)
    floors = _stored_floors(counters)
    families: list[Metric] = []
    for (name, help_text, labels), samples in counters.items():
        family = CounterMetricFamily(name, help_text, labels=list(labels))
        for values, _ in samples:
            floor = floors.get(_series(name, labels, values))
            if floor is not None:
                family.add_metric(list(values), floor)
        families.append(family)
    families.extend(_gauges(result))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return bytes(generate_latest(registry))


Samples = list[tuple[tuple[str, ...], float]]


def _counters(result: FleetTotalsResult) -> dict[tuple[str, str, tuple[str, ...]], Samples]:
    wall: Samples = []
    productive: Samples = []
    failures: Samples = []
    lost: Samples = []
    for scope in result.scopes:
        where = (scope.team, scope.cluster)
        wall.append((where, scope.wall_gpu_s))
        productive.append((where, scope.productive_gpu_s))
        failures.append((where, float(scope.failures)))
        lost.extend(((component, *where), gpu_s)
                    for component, gpu_s in sorted(scope.lost_gpu_s.items()))
    return {
        ("ett_wall_gpu_seconds", "Wall time of every job, times the accelerators it held.",
         SCOPE): wall,
        ("ett_productive_gpu_seconds", "GPU-seconds that trained on new data (ETT% = "
         "rate(productive) / rate(wall)).", SCOPE): productive,
        ("ett_lost_gpu_seconds", "Wall minus productive GPU-seconds, by owning component.",
         ("component", *SCOPE)): lost,
        ("ett_failures", "Attempts that ended failed, preempted or lost.", SCOPE): failures,
        ("ett_quarantined_lines", "Lines ingestion refused (with their reasons in the "
         "admin and on /collectors/).", ()): [((), float(result.quarantined_lines))],
    }


def _gauges(result: FleetTotalsResult) -> Iterator[Metric]:
    collectors = GaugeMetricFamily("ett_collectors", "Collector agents by their last word: "
                                   "reporting, silent past the threshold, or rejected (the "
                                   "server refuses their credential).", labels=["state"])
    collectors.add_metric(["reporting"], result.collectors_reporting)
    collectors.add_metric(["silent"], result.collectors_silent)
    collectors.add_metric(["rejected"], result.collectors_rejected)
    yield collectors
    for name, help_text, value in (
            ("ett_rollup_pending_jobs", "Jobs with stored events their rollups do not show "
             "yet.", result.pending_jobs),
            ("ett_rollup_lag_seconds", "Age of the oldest pending rollup refresh (0 when none): "
             "how far the numbers trail ingestion.", result.oldest_pending_s),
            ("ett_rollup_parked_jobs", "Jobs whose refresh failed the same way twice and waits "
             "for an admin (Parked refreshes in the admin); left out of the two above.",
             result.parked_jobs),
            ("ett_collector_backlog_events", "Spool records not yet shipped, all collectors.",
             result.backlog_events),
            ("ett_collector_dropped_events", "Events Reporters dropped (full spool or disk), "
             "as the collectors last reported.", result.dropped_events),
            ("ett_collector_corrupted_records", "Events lost to damaged spool records, as the "
             "collectors last reported.", result.corrupted_records)):
        yield GaugeMetricFamily(name, help_text, value=value)


def _series(name: str, labels: tuple[str, ...], values: tuple[str, ...]) -> str:
    """A counter series' stable key: its name and labels, or their hash when that is long
    (team and cluster names are free text of up to 200 characters each)."""
    pairs = ",".join(f"{k}={v!r}" for k, v in zip(labels, values, strict=True))
    key = f"{name}{{{pairs}}}"
    return key if len(key) <= 512 else f"{name}#{hashlib.sha256(key.encode()).hexdigest()}"


def _current(counters: dict[tuple[str, str, tuple[str, ...]], Samples]) -> dict[str, float]:
    """Every counter series' current value, by its key (one per series)."""
    return {_series(name, labels, values): value
            for (name, _, labels), samples in counters.items() for values, value in samples}


def _stored_floors(counters: dict[tuple[str, str, tuple[str, ...]], Samples],
                   ) -> dict[str, float]:
    """The stored floors of these series (a read)."""
    rows = CounterFloor.objects.filter(series__in=list(_current(counters)))
    return {series: float(value) for series, value in rows.values_list("series", "value")}


def raise_floors(result: FleetTotalsResult) -> int:
    """The worker's pass: store ``max(floor, value)`` for every counter series of
    ``result`` in one statement; returns how many series."""
    rows = list(_current(_counters(result)).items())
    if not rows:
        return 0
    placeholders = ", ".join(["(%s, %s)"] * len(rows))
    params: list[Any] = [item for row in rows for item in row]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO metrics_counterfloor (series, value) VALUES {placeholders} "
            "ON CONFLICT (series) DO UPDATE SET value = "
            "GREATEST(metrics_counterfloor.value, EXCLUDED.value)", params)
    return len(rows)


class _Families:
    """A registry collector that yields families built for one scrape."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
