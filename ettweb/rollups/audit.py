"""Audit: do the day sums still equal the day rows they sum?

The sum tables are kept by adding each refresh's changes (``rollups.day_sums``), never by
summing again, so a bug there would go unseen by every page. This sums the day rows afresh
and counts the cells that differ; the soak and the tests assert zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from ettweb.attribution.components import PRODUCTIVE
from ettweb.rollups.buckets import bucket_sql
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    JobDayRollup,
    JobRollup,
    LabelDayRollup,
    ScopeTotalRollup,
)


@dataclass(frozen=True)
class SumDrift:
    """Cells of the sum tables that differ from a fresh sum of the day rows (missing or
    extra cells included): zero and zero when the incremental upkeep is right."""

    fleet_days: int
    job_days: int
    label_days: int
    scope_totals: int


def day_sum_drift(rel_tol: float = 1e-9) -> SumDrift:
    """Compare the sum tables with the day rows summed now. Fleet and label cells must be
    equal exactly (their upkeep is exact); a job-day may differ by ``rel_tol`` (it is a
    float sum, in the engine's order or in Postgres's)."""
    t = _tables()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT day, category, SUM(seconds::numeric) AS s, "
            f"SUM(gpu_seconds::numeric) AS g FROM {t['days']} GROUP BY day, category) fresh "
            f"FULL JOIN {t['fleet']} f USING (day, category) "
            f"WHERE f.seconds IS DISTINCT FROM fresh.s "
            f"OR f.gpu_seconds IS DISTINCT FROM fresh.g")
        (fleet,) = cursor.fetchone() or (0,)
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT job, day, SUM(gpu_seconds) AS w, "
            f"COALESCE(SUM(gpu_seconds) FILTER (WHERE category = %s), 0) AS p "
            f"FROM {t['days']} GROUP BY job, day) fresh "
            f"FULL JOIN {t['job_days']} j USING (job, day) "
            f"WHERE j.job IS NULL OR fresh.w IS NULL "
            f"OR ABS(j.wall_gpu_seconds - fresh.w) > %s * GREATEST(1, ABS(fresh.w)) "
            f"OR ABS(j.productive_gpu_seconds - fresh.p) > %s * GREATEST(1, ABS(fresh.p))",
            [PRODUCTIVE, rel_tol, rel_tol])
        (job_days,) = cursor.fetchone() or (0,)
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT d.day, d.category, j.model, j.team, j.cluster, "
            f"{t['bucket']} AS gpus, SUM(d.seconds::numeric) AS s, "
            f"SUM(d.gpu_seconds::numeric) AS g FROM {t['days']} d JOIN {t['jobs']} j "
            f"ON j.job = d.job GROUP BY 1, 2, 3, 4, 5, 6) fresh "
            f"FULL JOIN {t['labels']} f USING (day, category, model, team, cluster, gpus) "
            f"WHERE f.seconds IS DISTINCT FROM fresh.s "
            f"OR f.gpu_seconds IS DISTINCT FROM fresh.g")
        (label_days,) = cursor.fetchone() or (0,)
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT j.team, j.cluster, d.category, "
            f"SUM(d.seconds::numeric) AS s, SUM(d.gpu_seconds::numeric) AS g "
            f"FROM {t['days']} d JOIN {t['jobs']} j ON j.job = d.job GROUP BY 1, 2, 3) fresh "
            f"FULL JOIN {t['scopes']} f USING (team, cluster, category) "
            f"WHERE f.seconds IS DISTINCT FROM fresh.s "
            f"OR f.gpu_seconds IS DISTINCT FROM fresh.g")
        (scope_totals,) = cursor.fetchone() or (0,)
    return SumDrift(int(fleet), int(job_days), int(label_days), int(scope_totals))


def _tables() -> dict[str, str]:
    return {"fleet": FleetDayRollup._meta.db_table, "job_days": JobDayRollup._meta.db_table,
            "labels": LabelDayRollup._meta.db_table,
            "scopes": ScopeTotalRollup._meta.db_table, "jobs": JobRollup._meta.db_table,
            "days": DailyCategoryRollup._meta.db_table, "bucket": bucket_sql("j.gpus")}
