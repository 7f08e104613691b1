"""Each breaker trip belongs to one cluster (issue #32: the breaker is per cluster).

The column first, nullable; 0018 gives the existing trips their cluster and 0019
requires it (three migrations, three transactions on PostgreSQL).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0016_alter_remediation_trigger"),
    ]

    operations = [
        migrations.AddField(
            model_name="breakertrip",
            name="cluster",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="breaker_trips",
                to="clusters.cluster",
            ),
        ),
    ]
