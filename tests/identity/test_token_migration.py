"""Tokens issued before they were listed (DRF's, in the clear) keep working, hashed."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient


@pytest.mark.django_db(transaction=True)
def test_a_clear_text_drf_token_is_hashed_into_the_list_and_still_works(researcher):
    from rest_framework.authtoken.models import Token

    from identity.models import ApiToken

    executor = MigrationExecutor(connection)
    executor.migrate([("portal", "0002_role_groups")])
    legacy = Token.objects.create(user=researcher)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("portal", "0003_hash_legacy_api_tokens")])

    assert not Token.objects.exists()
    stored = ApiToken.objects.get(user=researcher)
    assert legacy.key.startswith(stored.prefix) and legacy.key not in stored.token_hash
    # Forward again to every app's latest migration, before the API (which reads later
    # portal tables, such as the remembered cluster) is asked, and for the tests after.
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {legacy.key}")
    assert client.get("/api/v1/nodes/").status_code == 200
