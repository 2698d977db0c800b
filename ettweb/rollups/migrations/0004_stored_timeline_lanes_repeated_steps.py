"""The job page reads stored results: each attempt's category timeline and rank lanes, the
repeated steps of each attempt, and a digest so a refresh rewrites the drawing only when it
changed. Jobs rolled up before this have an empty digest and are refreshed on first view."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0003_dirty_jobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="attemptrollup",
            name="repeated_steps",
            field=models.BigIntegerField(
                default=0,
                help_text="steps this attempt's train spans trained again (ETT_SPEC §3.7)"),
        ),
        migrations.AddField(
            model_name="jobrollup",
            name="timeline_digest",
            field=models.CharField(
                blank=True, default="", max_length=32,
                help_text="digest of the stored timeline and rank lanes: a refresh rewrites "
                          "them only when it changes; empty for a job rolled up before they "
                          "were stored"),
        ),
        migrations.CreateModel(
            name="AttemptLane",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("attempt", models.PositiveIntegerField()),
                ("first_rank", models.PositiveIntegerField(
                    help_text="lowest rank of the lane (its order)")),
                ("ranks", models.TextField(help_text="rank set as ranges, e.g. 0-127, 130-255")),
                ("rank_count", models.PositiveIntegerField()),
                ("bin_s", models.FloatField()),
                ("runs", models.JSONField(default=list, help_text="[[state, start, end], ...]")),
                ("job", models.ForeignKey(db_column="job",
                                          on_delete=django.db.models.deletion.CASCADE,
                                          related_name="lane_rows", to="rollups.jobrollup",
                                          to_field="job")),
            ],
            options={
                "ordering": ["job", "attempt", "first_rank"],
                "constraints": [models.UniqueConstraint(fields=("job", "attempt", "first_rank"),
                                                        name="attemptlane_unique")],
            },
        ),
        migrations.CreateModel(
            name="AttemptTimeline",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("attempt", models.PositiveIntegerField()),
                ("bin_s", models.FloatField(default=0.0,
                                            help_text="0: exact pieces; else the grid's bin")),
                ("pieces", models.JSONField(default=list,
                                            help_text="[[category, start, end], ...]")),
                ("job", models.ForeignKey(db_column="job",
                                          on_delete=django.db.models.deletion.CASCADE,
                                          related_name="timeline_rows", to="rollups.jobrollup",
                                          to_field="job")),
            ],
            options={
                "ordering": ["job", "attempt"],
                "constraints": [models.UniqueConstraint(fields=("job", "attempt"),
                                                        name="attempttimeline_unique")],
            },
        ),
    ]
