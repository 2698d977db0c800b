# Parked refreshes: a job whose refresh keeps failing stops holding up the others.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0017_dirty_chunk_rows_per_batch"),
    ]

    operations = [
        migrations.CreateModel(
            name="ParkedRefresh",
            fields=[
                ("job", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("error", models.TextField(blank=True, default="",
                                           help_text="the last failure's error")),
                ("failures", models.IntegerField(default=0,
                                                 help_text="failures in a row with this error")),
                ("first_failed_at", models.DateTimeField(blank=True, null=True)),
                ("last_failed_at", models.DateTimeField(blank=True, null=True)),
                ("parked_at", models.DateTimeField(
                    blank=True, db_index=True, null=True,
                    help_text="set: refreshes skip the job until retried")),
                ("running_pid", models.IntegerField(
                    blank=True, null=True, help_text="database backend of the refresh under way")),
                ("running_since", models.DateTimeField(
                    blank=True, null=True,
                    help_text="when that backend started (tells a reused pid apart)")),
            ],
            options={
                "ordering": ["-parked_at", "job"],
                "verbose_name_plural": "parked refreshes",
            },
        ),
    ]
