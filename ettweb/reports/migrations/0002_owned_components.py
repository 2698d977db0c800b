"""Subscriptions follow what their user owns, not Django groups named like an owner team.

``teams`` listed first every component whose free-text owner team a subscriber chose, and
default subscriptions went to members of groups named like such a team: a second meaning of
"owner" beside the owner role's ``ComponentOwner`` rows. ``owned`` replaces it (list first
the components the user owns, read for each report). Each existing subscription's teams
become the components those teams own today, appended to its chosen ones in the order its
report listed them, so every existing report lists what it listed the day before; existing
subscriptions get ``owned`` off for the same reason, new ones on.

Backwards, ``teams`` comes back empty: the components it was turned into stay chosen.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def teams_to_components(apps: Any, schema_editor: Any) -> None:
    component_model = apps.get_model("components", "Component")
    for subscription in apps.get_model("reports", "Subscription").objects.order_by("pk"):
        if not subscription.teams:
            continue
        owned = (component_model.objects.filter(owner_team__in=subscription.teams)
                 .order_by("name").values_list("name", flat=True))
        chosen = list(subscription.components)
        subscription.components = chosen + [name for name in owned if name not in chosen]
        subscription.save(update_fields=["components"])


class Migration(migrations.Migration):

    dependencies = [
        ("components", "0001_initial"),
        ("reports", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="subscription", name="owned",
            field=models.BooleanField(default=False, help_text=(
                "also list first the components the user owns (their owner role's, read for "
                "each report)"))),
        migrations.RunPython(teams_to_components, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="subscription", name="owned",
            field=models.BooleanField(default=True, help_text=(
                "also list first the components the user owns (their owner role's, read for "
                "each report)"))),
        migrations.RemoveField(model_name="subscription", name="teams"),
    ]
