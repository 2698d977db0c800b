"""Issue 31: a chunk's JSON fields are compressed with lz4 where the server has it.

A refresh writes every recomputed chunk whole, and a chunk's carry, segments, timelines and
lanes run to kilobytes: Postgres compresses such values as it stores them, with pglz by
default, a large share of what writing a chunk costs. lz4 compresses several times faster (and
decompresses faster when a job page reads the lanes) for a little more space. A server
built without lz4 keeps pglz; existing values stay as they were stored until rewritten.
"""

from django.db import migrations

TABLE = "rollups_attributionchunk"
FIELDS = ("summary", "state", "carry", "segments", "timelines", "lanes")


def _set(method: str) -> str:
    columns = ", ".join(f"ALTER COLUMN {name} SET COMPRESSION {method}" for name in FIELDS)
    return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_settings WHERE name = "
            f"'default_toast_compression' AND '{method}' = ANY(enumvals)) THEN "
            f"ALTER TABLE {TABLE} {columns}; END IF; END $$")


class Migration(migrations.Migration):

    dependencies = [
        ("rollups", "0012_map_launch_phase"),
    ]

    operations = [
        migrations.RunSQL(_set("lz4"), reverse_sql=_set("pglz")),
    ]
