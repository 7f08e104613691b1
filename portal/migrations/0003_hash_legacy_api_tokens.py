"""API tokens issued before they were listed (DRF's authtoken, stored in the clear) become hashed ApiTokens.

They keep working, now show on their owner's tokens page by prefix, and no
whole token is left in the database.
"""

import hashlib

from django.db import migrations


def hash_legacy_tokens(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("portal", "ApiToken")
    for token in Token.objects.all():
        ApiToken.objects.create(
            user_id=token.user_id,
            name="API log-in",
            token_hash=hashlib.sha256(token.key.encode()).hexdigest(),
            prefix=token.key[:8],
            created_at=token.created,
        )
    Token.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0002_role_groups"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(hash_legacy_tokens, migrations.RunPython.noop)]
