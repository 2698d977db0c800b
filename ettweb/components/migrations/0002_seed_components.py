"""Seed one Component row per owning component of ETT_SPEC §4, with no owner team yet.

Owners fill in the team on the component page or in the admin; later changes to the code's
defaults never touch the table.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS

NAMES = sorted(set(DEFAULT_PHASE_COMPONENTS.values()))


def seed(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    component = apps.get_model("components", "Component")
    for name in NAMES:
        component.objects.get_or_create(name=name)


def unseed(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("components", "Component").objects.filter(name__in=NAMES,
                                                             owner_team="").delete()


class Migration(migrations.Migration):
    dependencies = [("components", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
