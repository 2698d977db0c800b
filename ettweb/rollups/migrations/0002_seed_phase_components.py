"""Seed the editable phase→component map from ETT_SPEC §4's defaults.

A fresh installation starts from the code's defaults; after that the table is the truth
(owners edit it in the admin) and later changes to the defaults never touch it.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS

DEFAULTS = dict(DEFAULT_PHASE_COMPONENTS)


def seed(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    phase_component = apps.get_model("rollups", "PhaseComponent")
    for phase, component in DEFAULTS.items():
        phase_component.objects.get_or_create(phase=phase, defaults={"component": component})


def unseed(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("rollups", "PhaseComponent").objects.filter(phase__in=DEFAULTS).delete()


class Migration(migrations.Migration):
    dependencies = [("rollups", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
