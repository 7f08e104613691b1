from __future__ import annotations

import pytest

from tests.demand.fake_prometheus import FakePrometheus


@pytest.fixture
def fake_prometheus():
    server = FakePrometheus()
    yield server
    server.stop()
