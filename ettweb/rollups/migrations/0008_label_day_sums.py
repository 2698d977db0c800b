"""Per day and category sums of the jobs sharing one model, team, cluster and GPU-size
bucket, filled here from the day rows (the sums ``ettweb.rollups.audit`` checks the table
against, with the buckets of ``ettweb.rollups.buckets`` frozen as they are today)."""

from django.db import migrations, models

import ettweb.rollups.models

LABEL_DAY_SUMS = (
    "INSERT INTO rollups_labeldayrollup (day, category, model, team, cluster, gpus, seconds, "
    "gpu_seconds) SELECT d.day, d.category, j.model, j.team, j.cluster, "
    "(CASE WHEN j.gpus <= 1 THEN '1' WHEN j.gpus <= 8 THEN '2-8' WHEN j.gpus <= 64 THEN '9-64' "
    "WHEN j.gpus <= 512 THEN '65-512' ELSE '513+' END), "
    "SUM(d.seconds::numeric), SUM(d.gpu_seconds::numeric) FROM rollups_dailycategoryrollup d "
    "JOIN rollups_jobrollup j ON j.job = d.job GROUP BY 1, 2, 3, 4, 5, 6")


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0007_fleet_and_job_day_sums'),
    ]

    operations = [
        migrations.CreateModel(
            name='LabelDayRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('day', models.DateField()),
                ('category', models.CharField(max_length=64)),
                ('model', models.CharField(blank=True, default='', max_length=200)),
                ('team', models.CharField(blank=True, default='', max_length=200)),
                ('cluster', models.CharField(blank=True, default='', max_length=200)),
                ('gpus', models.CharField(help_text='GPU-size bucket, e.g. 9-64',
                                          max_length=16)),
                ('seconds', ettweb.rollups.models.ExactSumField()),
                ('gpu_seconds', ettweb.rollups.models.ExactSumField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(
                    fields=('day', 'category', 'model', 'team', 'cluster', 'gpus'),
                    name='labeldayrollup_unique')],
            },
        ),
        migrations.RunSQL(LABEL_DAY_SUMS, reverse_sql=migrations.RunSQL.noop),
    ]
