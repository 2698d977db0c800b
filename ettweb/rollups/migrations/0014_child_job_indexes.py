"""Issue 31: the per-job tables keep the indexes their reads use, not the ones Django adds.

A foreign key to ``JobRollup.job`` got an index of its own and a ``varchar_pattern_ops`` copy
of it; every child table already has a unique or ``(job, day)`` index starting with the job,
so the two only made each row a refresh writes dearer. The job and dirty-mark tables lose
their ``varchar_pattern_ops`` copies too: nothing searches job ids by prefix (the jobs page's
search is a substring match, which no such index serves).
"""

from django.db import migrations, models

#: Child model -> the related name of its ``job`` foreign key.
CHILDREN = {"attemptrollup": "attempt_rows", "attempttimeline": "timeline_rows",
            "dailycategoryrollup": "day_rows", "jobdayrollup": "job_days",
            "joblostrollup": "lost_rows", "recoverypartrollup": "recovery_parts",
            "recoveryrollup": "recovery_rows"}
#: Django's ``varchar_pattern_ops`` indexes of the unique job columns: (table, index).
LIKE_INDEXES = (("rollups_jobrollup", "rollups_jobrollup_job_ddf1f8dd_like"),
                ("rollups_dirtyjob", "rollups_dirtyjob_job_777808eb_like"))


def _unindexed(model: str, related_name: str) -> migrations.AlterField:
    return migrations.AlterField(
        model_name=model, name="job",
        field=models.ForeignKey(db_column="job", db_index=False, on_delete=models.CASCADE,
                                related_name=related_name, to="rollups.jobrollup",
                                to_field="job"))


def _drop_like(table: str, index: str) -> migrations.RunSQL:
    return migrations.RunSQL(
        f"DROP INDEX IF EXISTS {index}",
        reverse_sql=f"CREATE INDEX {index} ON {table} (job varchar_pattern_ops)")


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0013_chunk_lz4"),
    ]

    operations = [
        *(_unindexed(model, related) for model, related in CHILDREN.items()),
        *(_drop_like(table, index) for table, index in LIKE_INDEXES),
    ]
