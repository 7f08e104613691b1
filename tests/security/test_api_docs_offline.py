"""The API docs work without internet: Swagger UI comes from our static files."""

from __future__ import annotations

import re

from django.test import Client


def test_the_swagger_page_loads_nothing_from_another_host(db):
    response = Client().get("/api/v1/docs/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', page)
    assert "cdn.jsdelivr" not in page


def test_the_swagger_files_are_in_the_static_files():
    from django.contrib.staticfiles import finders

    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
