"""All-time sums per team, cluster and category for ``/metrics``, filled here from the label
sums (exact numeric sums of the day rows, so their sum is the day rows' exact sum too)."""

from django.db import migrations, models

import ettweb.rollups.models

SCOPE_TOTALS = (
    "INSERT INTO rollups_scopetotalrollup (team, cluster, category, seconds, gpu_seconds) "
    "SELECT team, cluster, category, SUM(seconds), SUM(gpu_seconds) "
    "FROM rollups_labeldayrollup GROUP BY 1, 2, 3 "
    "HAVING SUM(seconds) <> 0 OR SUM(gpu_seconds) <> 0")


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0015_component_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='ScopeTotalRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('team', models.CharField(blank=True, default='', max_length=200)),
                ('cluster', models.CharField(blank=True, default='', max_length=200)),
                ('category', models.CharField(max_length=64)),
                ('seconds', ettweb.rollups.models.ExactSumField()),
                ('gpu_seconds', ettweb.rollups.models.ExactSumField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('team', 'cluster', 'category'),
                                                        name='scopetotalrollup_unique')],
            },
        ),
        migrations.RunSQL(SCOPE_TOTALS, reverse_sql=migrations.RunSQL.noop),
    ]
