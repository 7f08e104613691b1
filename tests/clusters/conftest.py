from __future__ import annotations

import pytest

from clusters.backends.kubernetes import KubernetesFleet
from tests.clusters.fake_apiserver import FakeApiServer


@pytest.fixture
def server():
    fake = FakeApiServer().start()
    yield fake
    fake.stop()


@pytest.fixture
def make_fleet(server):
    def make(**kwargs) -> KubernetesFleet:
        # Short waits keep the retry paths fast; the waiting logic is the same.
        options = {"backoff_s": 0.01, "max_backoff_s": 0.05, "poll_interval_s": 0.01}
        options.update(kwargs)
        return KubernetesFleet(host=server.url, token=server.token, **options)

    return make


@pytest.fixture
def fleet(make_fleet):
    return make_fleet()
