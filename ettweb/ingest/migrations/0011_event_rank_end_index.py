"""Index spans by job, attempt, rank and end: what ETT_SPEC §3 rule 3 asks of a rank.

Why: the implied train span of a hard-killed rank (``ettweb.rollups.implied_store``) needs
the rank's latest span ended by its latest heartbeat, its latest such train span, and
whether a train span is open across the heartbeat. The (job, home) index finds those only
by reading every rank's events around the heartbeat; this one is a probe per rank and
daily partition. Spans only: marks never need it, so heartbeats cost ingestion nothing.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0010_collector_rejection_bounds"),
    ]

    operations = [
        migrations.RunSQL(
            'CREATE INDEX event_rank_end ON ingest_event ("job", "attempt", "rank", "end") '
            "WHERE kind = 'span'",
            reverse_sql="DROP INDEX IF EXISTS event_rank_end"),
    ]
