"""Covering indexes for a component's top jobs and models and a rollout's scope.

A component's page reads its categories' day rows of a range, then joins the jobs to their
model; a rollout's impact lists the jobs its scope's labels name. Without these, Postgres
scanned every category's day rows and the wide job rows (each holds its chunk list).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rollups", "0014_child_job_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="dailycategoryrollup",
            index=models.Index(fields=["category", "day"], include=("job", "gpu_seconds"),
                               name="dailyrollup_category_day"),
        ),
        migrations.RemoveIndex(model_name="jobrollup", name="jobrollup_labels"),
        migrations.AddIndex(
            model_name="jobrollup",
            index=models.Index(fields=["model", "team", "cluster"], include=("job",),
                               name="jobrollup_labels"),
        ),
    ]
