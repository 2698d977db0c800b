"""Each recovery's GPU-seconds per category as rows, filled here from the recoveries'
``by_category_gpu``, which holds the same numbers: no refresh needed."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = (
    "INSERT INTO rollups_recoverypartrollup (job, attempt, day, category, gpu_seconds) "
    "SELECT r.job, r.attempt, r.day, part.key, part.value::double precision "
    "FROM rollups_recoveryrollup AS r, jsonb_each_text(r.by_category_gpu) AS part "
    "WHERE part.value::double precision <> 0")


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0008_label_day_sums'),
    ]

    operations = [
        migrations.CreateModel(
            name='RecoveryPartRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('attempt', models.PositiveIntegerField()),
                ('day', models.DateField()),
                ('category', models.CharField(max_length=64)),
                ('gpu_seconds', models.FloatField()),
                ('job', models.ForeignKey(db_column='job',
                                          on_delete=django.db.models.deletion.CASCADE,
                                          related_name='recovery_parts',
                                          to='rollups.jobrollup', to_field='job')),
            ],
            options={
                'indexes': [models.Index(fields=['day'], name='recoverypart_day')],
                'constraints': [models.UniqueConstraint(fields=('job', 'attempt', 'category'),
                                                        name='recoverypart_unique')],
            },
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
    ]
