"""Chunk marks become one row per job and batch (an array of chunks) instead of one row per
chunk; marks waiting now are folded into one row per job."""

import django.contrib.postgres.fields
from django.db import migrations, models

FOLD_MARKS = (
    "INSERT INTO rollups_dirtychunk (job, chunk, chunks) "
    "SELECT job, 0, array_agg(chunk ORDER BY chunk) FROM rollups_dirtychunk GROUP BY job; "
    "DELETE FROM rollups_dirtychunk WHERE cardinality(chunks) = 0")


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0016_scope_totals'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='dirtychunk',
            name='dirtychunk_unique',
        ),
        migrations.AddField(
            model_name='dirtychunk',
            name='chunks',
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(), default=list,
                help_text='indexes of the chunks marked', size=None),
            preserve_default=False,
        ),
        migrations.RunSQL(FOLD_MARKS, reverse_sql=migrations.RunSQL.noop),
        migrations.RemoveField(
            model_name='dirtychunk',
            name='chunk',
        ),
        migrations.AddIndex(
            model_name='dirtychunk',
            index=models.Index(fields=['job'], name='dirtychunk_job'),
        ),
    ]
