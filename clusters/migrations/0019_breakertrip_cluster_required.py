"""Every breaker trip names its cluster, once 0018 has placed the existing ones.

Apart from 0017 so that, on PostgreSQL, the column is altered in a transaction of its own:
altering it after the backfill's updates in one transaction fails on their pending
foreign-key checks.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0018_place_breaker_trips"),
    ]

    operations = [
        migrations.AlterField(
            model_name="breakertrip",
            name="cluster",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="breaker_trips",
                to="clusters.cluster",
            ),
        ),
    ]
