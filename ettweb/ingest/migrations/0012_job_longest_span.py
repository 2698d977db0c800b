"""Each job's longest span, so rule 3's lookups reach back only as far as a span can
(``ettweb.rollups.implied_store``). Jobs stored before keep NULL: not known."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0011_event_rank_end_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="longest_span_s",
            field=models.FloatField(blank=True, null=True,
                                    help_text="its longest span, seconds (NULL: not known)"),
        ),
    ]
