"""The adjusted estimate's draws beside §6's (ETT_SPEC §6.2); rows of the old layout are
never read again (the digest changed) and the warm pass prunes them within a week."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rollouts', '0002_bootstrap_draws'),
    ]

    operations = [
        migrations.AddField(
            model_name='bootstrapdraws',
            name='adjusted',
            field=models.BinaryField(help_text='float64 (draws, 3): the adjusted treated, '
                                               'control and DiD changes', null=True),
        ),
        migrations.AlterField(
            model_name='bootstrapdraws',
            name='treated',
            field=models.BinaryField(help_text="float64 (draws, 2): the ETT% and the "
                                               "component's changes; null: too few jobs",
                                     null=True),
        ),
    ]
