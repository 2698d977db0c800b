"""Chunked attribution (issue 15): the chunks a job's timeline is kept in and the chunks
ingestion marks for a refresh. The per-attempt rank lanes move into their chunks."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0009_recovery_parts"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrollup",
            name="chunks",
            field=models.PositiveIntegerField(default=0,
                                              help_text="occupied chunks of its timeline"),
        ),
        migrations.CreateModel(
            name="AttributionChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("job", models.CharField(max_length=200)),
                ("chunk", models.BigIntegerField(
                    help_text="index: the chunk starts at chunk x chunk_s")),
                ("chunk_s", models.FloatField(help_text="chunk length in seconds (ETT_CHUNK_S)")),
                ("summary", models.JSONField(default=dict,
                                             help_text="attempt -> its home events summed up")),
                ("state", models.JSONField(
                    default=dict, help_text="key, high-water mark, carry digest, parts")),
                ("carry", models.JSONField(default=list,
                                           help_text="spans open at the chunk's end")),
                ("segments", models.JSONField(default=list,
                                              help_text="[[start, end, attempt, shares], ...]")),
                ("timelines", models.JSONField(default=list,
                                               help_text="[[attempt, bin_s, pieces], ...]")),
                ("lanes", models.JSONField(
                    default=list,
                    help_text="[[attempt, first_rank, ranks, rank_count, bin_s, runs]]")),
                ("final", models.BooleanField(default=False)),
                ("written_at", models.DateTimeField()),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("job", "chunk"),
                                                        name="attributionchunk_unique")],
            },
        ),
        migrations.CreateModel(
            name="DirtyChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("job", models.CharField(max_length=200)),
                ("chunk", models.BigIntegerField()),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("job", "chunk"),
                                                        name="dirtychunk_unique")],
            },
        ),
        migrations.DeleteModel(
            name="AttemptLane",
        ),
        # Every job rolled up before chunks existed is refreshed by beat's safety net (a
        # mark this old is stale at once): its chunks and lanes are then computed.
        migrations.RunSQL(
            "INSERT INTO rollups_dirtyjob (job, marked_at) SELECT job, 0 FROM rollups_jobrollup "
            "ON CONFLICT DO NOTHING", reverse_sql=migrations.RunSQL.noop),
    ]
