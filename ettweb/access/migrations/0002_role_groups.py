"""The role groups ``viewer``, ``owner`` and ``admin``; staff users become admins.

Until roles existed, ``is_staff`` was what let a user record and edit rollouts and owner
teams (and use the admin), so every staff user joins ``admin`` and nobody loses what they
could do the day this lands. ``viewer`` has no powers; it exists so that "viewer" can be
given explicitly (a user in no group is a viewer too).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

ROLES = ("viewer", "owner", "admin")


def create_roles(apps: Any, schema_editor: Any) -> None:
    group_model = apps.get_model("auth", "Group")
    user_model = apps.get_model("auth", "User")
    groups = {name: group_model.objects.get_or_create(name=name)[0] for name in ROLES}
    for user in user_model.objects.filter(is_staff=True):
        user.groups.add(groups["admin"])


def remove_roles(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("access", "0001_component_owner"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
