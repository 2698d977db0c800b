"""Issue 27, item 7: credential rejections per source, and the nonces of credential checks."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0007_event_horizon"),
    ]

    operations = [
        migrations.CreateModel(
            name="CheckNonce",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("nonce", models.CharField(max_length=64, unique=True)),
                ("seen_at", models.FloatField(db_index=True, help_text="epoch seconds")),
            ],
        ),
        migrations.CreateModel(
            name="CollectorRejection",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("source", models.CharField(max_length=200)),
                ("collector_id", models.CharField(
                    blank=True, default="", help_text="the id the refused message claimed",
                    max_length=64)),
                ("reason", models.TextField(help_text="the latest refusal's reason")),
                ("refused", models.CharField(
                    help_text="what was refused last: a batch, a health report, a credential "
                              "check", max_length=32)),
                ("refusals", models.BigIntegerField(default=1)),
                ("first_at", models.DateTimeField()),
                ("last_at", models.DateTimeField(db_index=True)),
            ],
            options={
                "ordering": ["-last_at"],
                "constraints": [models.UniqueConstraint(
                    fields=("source", "collector_id"), name="one_rejection_per_source_and_id")],
            },
        ),
    ]
