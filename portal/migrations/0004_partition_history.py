"""Node and job state changes and health events partitioned by month on PostgreSQL.

See reports/partitions.py. Django's state is unchanged (the models keep `id`
as their key); on SQLite this does nothing.
"""

from django.db import migrations


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from reports.partitions import HISTORY_TABLES, is_partitioned, partition_table

    for history in HISTORY_TABLES:
        if not is_partitioned(history):
            partition_table(history)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from reports.partitions import HISTORY_TABLES, is_partitioned, unpartition_table

    for history in HISTORY_TABLES:
        if is_partitioned(history):
            unpartition_table(history)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0003_hash_legacy_api_tokens"),
        ("clusters", "0011_history_rollups"),
        ("jobs", "0008_history_rollups"),
        ("health", "0003_history_rollups"),
    ]

    operations = [migrations.RunPython(partition, unpartition, elidable=False)]
