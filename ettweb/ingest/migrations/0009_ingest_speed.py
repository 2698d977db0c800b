"""Issue 31: what the ingest path writes per batch, made cheaper.

- Events are COPied straight into the events table, so ``received_at`` takes the database's
  ``now()`` as its default (the transaction's start, as the INSERT it replaces wrote).
- The dedup table loses the ``varchar_pattern_ops`` index Django adds to a text primary key:
  nothing searches event ids by prefix, and every stored event paid for its upkeep.
- Jobs keep the home times their events span, so a refresh reads a new job's events from
  its days' partitions only (unknown, NULL, for jobs stored before).
"""

from django.db import migrations, models

LIKE_INDEX = "ingest_eventid_event_id_b7043034_like"


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0008_collector_rejections"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE ingest_event ALTER COLUMN received_at SET DEFAULT now()",
            reverse_sql="ALTER TABLE ingest_event ALTER COLUMN received_at DROP DEFAULT"),
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {LIKE_INDEX}",
            reverse_sql=f"CREATE INDEX {LIKE_INDEX} ON ingest_eventid "
                        "(event_id varchar_pattern_ops)"),
        migrations.AddField(
            model_name="job",
            name="first_home",
            field=models.FloatField(blank=True, null=True,
                                    help_text="earliest home time of its events, epoch seconds"),
        ),
        migrations.AddField(
            model_name="job",
            name="last_home",
            field=models.FloatField(blank=True, null=True,
                                    help_text="latest home time of its events, epoch seconds"),
        ),
    ]
