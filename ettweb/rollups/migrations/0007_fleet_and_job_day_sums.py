"""The fleet's per-day category sums and each job's per-day wall/productive sums.

Filled here from the day rows, which hold the same numbers: no refresh needed. The sums
are the ones ``ettweb.rollups.audit`` checks the tables against (copied: a migration must
not change when the app's code does).
"""

import django.db.models.deletion
from django.db import migrations, models

import ettweb.rollups.models

FLEET_DAY_SUMS = (
    "INSERT INTO rollups_fleetdayrollup (day, category, seconds, gpu_seconds) "
    "SELECT day, category, SUM(seconds::numeric), SUM(gpu_seconds::numeric) "
    "FROM rollups_dailycategoryrollup GROUP BY day, category")
JOB_DAY_SUMS = (
    "INSERT INTO rollups_jobdayrollup (job, day, wall_gpu_seconds, productive_gpu_seconds) "
    "SELECT job, day, SUM(gpu_seconds), COALESCE(SUM(gpu_seconds) FILTER "
    "(WHERE category = 'productive'), 0) FROM rollups_dailycategoryrollup GROUP BY job, day")


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0006_job_lost_rows'),
    ]

    operations = [
        migrations.CreateModel(
            name='FleetDayRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('day', models.DateField()),
                ('category', models.CharField(max_length=64)),
                ('seconds', ettweb.rollups.models.ExactSumField()),
                ('gpu_seconds', ettweb.rollups.models.ExactSumField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('day', 'category'),
                                                        name='fleetdayrollup_unique')],
            },
        ),
        migrations.CreateModel(
            name='JobDayRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('day', models.DateField()),
                ('wall_gpu_seconds', models.FloatField()),
                ('productive_gpu_seconds', models.FloatField()),
                ('job', models.ForeignKey(db_column='job',
                                          on_delete=django.db.models.deletion.CASCADE,
                                          related_name='job_days', to='rollups.jobrollup',
                                          to_field='job')),
            ],
            options={
                'indexes': [models.Index(fields=['job', 'day'], name='jobdayrollup_job_day')],
                'constraints': [models.UniqueConstraint(fields=('day', 'job'),
                                                        name='jobdayrollup_unique')],
            },
        ),
        migrations.RunSQL(FLEET_DAY_SUMS, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(JOB_DAY_SUMS, reverse_sql=migrations.RunSQL.noop),
    ]
