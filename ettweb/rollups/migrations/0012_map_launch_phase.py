"""Map the ``launch`` phase (``collector.run``'s span) to ``cluster_runtime`` on existing sites.

0002 seeds a fresh site's map from the code's defaults, which now include ``launch``; a site
seeded before would read it as ``unknown``. A site that already maps ``launch`` keeps its row:
the table is the owners' truth.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

PHASE, COMPONENT = "launch", "cluster_runtime"


def add(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    phase_component = apps.get_model("rollups", "PhaseComponent")
    phase_component.objects.get_or_create(phase=PHASE, defaults={"component": COMPONENT})


def remove(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("rollups", "PhaseComponent").objects.filter(
        phase=PHASE, component=COMPONENT).delete()


class Migration(migrations.Migration):
    dependencies = [("rollups", "0011_job_instrumentation")]

    operations = [migrations.RunPython(add, remove)]
