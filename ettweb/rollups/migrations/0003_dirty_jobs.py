"""Dirty-job marks: ingestion marks a job, a debounced ``ett.refresh_rollups`` clears it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0002_seed_phase_components"),
    ]

    operations = [
        migrations.CreateModel(
            name="DirtyJob",
            fields=[
                ("job", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("marked_at", models.FloatField(
                    help_text="epoch seconds the job was first marked since its last refresh")),
            ],
        ),
    ]
