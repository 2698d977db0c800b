"""API tokens may expire (issue 40, design point 5h): ``expires_at``, empty for never.

Every existing token keeps working (empty); the admin's list shows which never expire.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("api", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True, help_text=(
                "refused from this moment on (UTC); empty: never expires")),
        ),
    ]
