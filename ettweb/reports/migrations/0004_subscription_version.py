"""Unsubscribe links are bound to the subscription's version (issue 40, item 5g).

``version`` goes up each time a subscription is turned back on; a link carries the version
it was made for. Every existing subscription starts at 1, the version links made before
this migration are read as, so every link already sent keeps working until its subscriber
turns the report back on.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0003_subscription_address_from_account"),
    ]

    operations = [
        migrations.AddField(
            model_name="subscription",
            name="version",
            field=models.PositiveIntegerField(default=1, editable=False, help_text=(
                "goes up each time the report is turned back on: unsubscribe links of an "
                "earlier version no longer unsubscribe")),
        ),
    ]
