"""Refused credentials bounded and tallied per reason; the per-source rate limit's buckets.

The tally starts from the rows already kept, so its totals include every refusal recorded
before it existed (the per-source rows are pruned to their bound by the next refusal or by
beat). The reason's key is cut where the sender's choice starts, as
``ettweb.ingest.credentials.reason_kind`` does (copied: a migration must not change when
that code does).
"""

import re

from django.db import migrations, models

_CHOSEN_BY_SENDER = re.compile(r"(unknown collector|revoked collector|, got) .*", re.DOTALL)
_KINDS = 64


def tally_existing(apps, schema_editor):
    rejection = apps.get_model("ingest", "CollectorRejection")
    tally = apps.get_model("ingest", "RejectionTally")
    kinds = {}
    for row in rejection.objects.iterator():
        kind = _CHOSEN_BY_SENDER.sub(r"\1 …", row.reason)[:200]
        if kind not in kinds and len(kinds) >= _KINDS - 1:
            kind = "other reasons (past the first 64 kinds)"
        entry = kinds.setdefault(kind, {"refusals": 0, "sources": 0, "first_at": row.first_at,
                                        "last_at": row.last_at})
        entry["refusals"] += row.refusals
        entry["sources"] += 1
        entry["first_at"] = min(entry["first_at"], row.first_at)
        entry["last_at"] = max(entry["last_at"], row.last_at)
    tally.objects.bulk_create(tally(reason=kind, **entry) for kind, entry in kinds.items())


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0009_ingest_speed'),
    ]

    operations = [
        migrations.CreateModel(
            name='RejectionTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('reason', models.CharField(max_length=200, unique=True)),
                ('refusals', models.BigIntegerField(
                    default=0, help_text='refused messages, all sources')),
                ('sources', models.BigIntegerField(default=0, help_text=(
                    '(source, claimed id) pairs first refused for this reason, pruned ones '
                    'included'))),
                ('first_at', models.DateTimeField()),
                ('last_at', models.DateTimeField()),
            ],
            options={
                'ordering': ['-refusals', 'reason'],
                'verbose_name_plural': 'rejection tallies',
            },
        ),
        migrations.CreateModel(
            name='SourceBucket',
            fields=[
                ('slot', models.IntegerField(primary_key=True, serialize=False)),
                ('tat', models.FloatField(
                    help_text="epoch seconds: when the slot's bucket is full again")),
            ],
        ),
        migrations.RunPython(tally_existing, migrations.RunPython.noop),
    ]
