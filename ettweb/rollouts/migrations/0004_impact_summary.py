"""Each rollout's impact headline per window, written by the warm pass, read by the list."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rollouts', '0003_bootstrap_adjusted'),
    ]

    operations = [
        migrations.CreateModel(
            name='ImpactSummary',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('window_days', models.PositiveSmallIntegerField()),
                ('computed_at', models.DateTimeField()),
                ('partial', models.BooleanField(default=False)),
                ('verdict', models.CharField(help_text="§6's unadjusted ETT% verdict",
                                             max_length=16)),
                ('component_verdict', models.CharField(max_length=16)),
                ('component_change_pts', models.FloatField(null=True)),
                ('component_ci_low', models.FloatField(null=True)),
                ('component_ci_high', models.FloatField(null=True)),
                ('adjusted_verdict', models.CharField(max_length=16)),
                ('adjusted_change_pts', models.FloatField(null=True)),
                ('adjusted_ci_low', models.FloatField(null=True)),
                ('adjusted_ci_high', models.FloatField(null=True)),
                ('rollout', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                              related_name='summaries',
                                              to='rollouts.rollout')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('rollout', 'window_days'),
                                                        name='impactsummary_rollout_window')],
            },
        ),
    ]
