"""The completeness check's findings (issue 30) are stored with each job's rollup, so the job
page reads them like its other numbers. Existing rows stay null ("not checked") until the job
is rolled up again whole (``manage.py ett_rebuild_rollups``): their chunks' summaries predate
the facts the check reads."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rollups', '0010_chunks'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrollup',
            name='instrumentation',
            field=models.JSONField(
                blank=True, default=None, null=True,
                help_text='the completeness check: {"findings": [...]} '
                          '(ettweb.attribution.completeness); null: not checked '
                          '(rolled up before it)'),
        ),
    ]
