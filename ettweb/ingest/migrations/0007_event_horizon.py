"""Retention (issue 15): the horizon before which raw events were dropped."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0006_event_job_home_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="EventHorizon",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("before", models.FloatField(
                    help_text="epoch seconds; null: nothing dropped yet", null=True)),
                ("dropped_events", models.BigIntegerField(default=0)),
                ("updated_at", models.DateTimeField(null=True)),
            ],
        ),
    ]
