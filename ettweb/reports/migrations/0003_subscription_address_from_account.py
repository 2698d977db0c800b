"""Report addresses are the account's, unless an admin set another (issue 40, item 4a).

Until now anyone could type any address on ``/reports/settings/``, so an existing address
that is not the account's cannot be told apart from one an admin chose. Each subscription
is pointed at its account's address (the one ETT can vouch for); one whose account has no
address is turned off, as if unsubscribed, so no report goes on to an address nobody
vouched for. An admin who had set another address sets it again in the admin (it is then
kept as theirs); the settings page tells an account without an address whom to ask.

Backwards, the field goes; the addresses stay the accounts'.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.utils import timezone


def point_at_account_addresses(apps: Any, schema_editor: Any) -> None:
    subscriptions = apps.get_model("reports", "Subscription")
    records = apps.get_model("reports", "SendRecord")
    now = timezone.now()
    for subscription in subscriptions.objects.select_related("user").order_by("pk"):
        account = (subscription.user.email or "").strip()
        if account:
            if subscription.email != account:
                subscription.email = account
                subscription.save(update_fields=["email"])
        elif subscription.enabled:
            subscription.enabled = False
            subscription.unsubscribed_at = subscription.unsubscribed_at or now
            subscription.save(update_fields=["enabled", "unsubscribed_at"])
            records.objects.filter(subscription=subscription,
                                   status__in=("pending", "retry")).update(
                status="cancelled", last_error="turned off: the account has no e-mail "
                                               "address, and reports go only there")


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0002_owned_components"),
    ]

    operations = [
        migrations.AddField(
            model_name="subscription",
            name="email_from_admin",
            field=models.BooleanField(default=False, help_text=(
                "the address was set by an admin and is not the account's; otherwise it is "
                "the account's, and follows it when the account's address changes")),
        ),
        migrations.AlterField(
            model_name="subscription",
            name="email",
            field=models.EmailField(help_text=("where the report goes: the account's "
                                               "address, or another one an admin set here"),
                                    max_length=254),
        ),
        migrations.RunPython(point_at_account_addresses, migrations.RunPython.noop),
    ]
