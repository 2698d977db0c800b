"""Drop the events' ``received_at`` index: no query reads it, and every stored event paid
for one more btree insert on the ingest hot path (``bench.ingest``)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0002_auth_health_partitioned_events"),
    ]

    operations = [
        migrations.RunSQL(
            "DROP INDEX IF EXISTS event_received",
            reverse_sql='CREATE INDEX event_received ON ingest_event ("received_at")'),
    ]
