"""Index the events by job and home time (``coalesce(start, ts)``, the partition key).

Why: the chunked attribution (issue 15) reads one chunk of one job at a time, a range of
home times; this index answers it with one range scan in the one partition holding it. It
replaces the (job, attempt) index, which only lookups by job used and which this one also
serves: the hot ingest path still pays for one index per event, not two.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0005_health_report_order"),
    ]

    operations = [
        migrations.RunSQL(
            'CREATE INDEX event_job_home ON ingest_event ("job", (coalesce("start", "ts")))',
            reverse_sql="DROP INDEX IF EXISTS event_job_home"),
        migrations.RunSQL(
            "DROP INDEX IF EXISTS event_job_attempt",
            reverse_sql='CREATE INDEX event_job_attempt ON ingest_event ("job", "attempt")'),
    ]
