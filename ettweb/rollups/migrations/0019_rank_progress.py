"""Each attempt and rank's latest stepped heartbeat and the span it implies (issue 41)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0018_parked_refresh"),
    ]

    operations = [
        migrations.CreateModel(
            name="RankProgress",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("job", models.CharField(max_length=200)),
                ("attempt", models.PositiveIntegerField()),
                ("rank", models.PositiveIntegerField()),
                ("beat_id", models.CharField(help_text="the latest stepped heartbeat's id",
                                             max_length=64)),
                ("beat_ts", models.FloatField(help_text="its time, epoch seconds")),
                ("beat_step", models.BigIntegerField(help_text="its step (steps completed)")),
                ("earlier_max", models.BigIntegerField(blank=True, help_text=(
                    "the highest step of its earlier heartbeats (above beat_step: went "
                    "backwards)"), null=True)),
                ("start", models.FloatField(blank=True, help_text="the implied span's start",
                                            null=True)),
                ("step_start", models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "rank progress",
                "constraints": [models.UniqueConstraint(fields=("job", "attempt", "rank"),
                                                        name="rank_progress_unique")],
            },
        ),
    ]
