"""The role groups exist from the first `migrate`, not only after `demo`.

Written out rather than read from core.roles.Role: a migration must keep
doing what it did when it was written.
"""

from django.db import migrations

ROLE_GROUPS = ("researcher", "admin", "manager")


def create_role_groups(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ROLE_GROUPS:
        Group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0001_accounts"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    # Reversing leaves the groups: people may be in them.
    operations = [migrations.RunPython(create_role_groups, migrations.RunPython.noop)]
