"""Debian's Prometheus server and promtool for the tests that need them (apt-get install
prometheus; .ci/services installs it in CI)."""

from __future__ import annotations

import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "deploy", "prometheus", "medbay-rules.yml")
RULE_TESTS = os.path.join(ROOT, "deploy", "prometheus", "medbay-rules-test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "medbay.json")


def require_tool(name: str) -> str:
    """The tool's path; where it is missing, skip saying why, or with CI=true fail, as
    integration tests never silently skip there."""
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {name} is not installed (apt-get install prometheus)")
    pytest.skip(f"needs {name}: apt-get install prometheus")
