"""/metrics: Prometheus text with Medbay's figures, only for allowed addresses or the token."""

from __future__ import annotations

import math
import os
import re
import stat
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.backends.base import BackendError
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import SLURM_TOOLS
from clusters.models import Cluster, Node
from health.models import NodeToken
from portal.metrics.slurm_commands import SLURM_BUCKETS_S, SLURM_KEY
from remediation.models import BreakerTrip, Remediation, RemediationStep

SAMPLE = re.compile(r'^([a-z_]+)(\{(?:[a-z_]+="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.e+-]+|\+Inf|NaN)$')


@pytest.fixture(autouse=True)
def private_counters(settings):
    # Counters live in the cache: a key prefix per test starts them at zero
    # without flushing a Redis that others may share.
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }
    yield
    # The Slurm counters never expire; leave nothing behind in a shared Redis.
    cache.delete_many(
        [
            SLURM_KEY.format(tool=tool, field=field)
            for tool in (*SLURM_TOOLS, "other")
            for field in (*(f"b{i}" for i in range(len(SLURM_BUCKETS_S) + 1)), "sum_us", "errors")
        ]
    )


LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def canonical(key: str) -> str:
    """A sample's name and labels with the labels in name order, as the test writes them
    or as the client library orders them (it puts `le` first)."""
    name, _, labels = key.partition("{")
    pairs = sorted(LABEL.findall(labels))
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if pairs else "")


class Samples(dict):
    """Samples by name and labels, looked up whatever the labels' order."""

    def __getitem__(self, key):
        return super().__getitem__(canonical(key))

    def __contains__(self, key):
        return super().__contains__(canonical(key))


def scrape(client: Client | None = None, **extra) -> Samples:
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = Samples()
    for line in response.content.decode().splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        samples[canonical(f"{match.group(1)}{match.group(2) or ''}")] = float(match.group(3))
    return samples


def test_every_family_has_help_and_type_lines_before_its_samples(synced):
    text = Client().get("/metrics").content.decode()
    declared = set(re.findall(r"^# TYPE (\w+) (?:gauge|counter|histogram|summary)$", text, re.M))
    helped = set(re.findall(r"^# HELP (\w+) ", text, re.M))

    assert declared == helped
    assert {"medbay_nodes", "medbay_gpus", "medbay_remediation_runs"} <= declared
    for name in re.findall(r"^(\w+?)(?:_bucket|_sum|_count)?[{ ]", text, re.M):
        assert name in declared or re.sub(r"_(bucket|sum|count)$", "", name) in declared


def test_nodes_are_counted_by_status_and_gpus_by_health(synced, sim):
    sim.drain_node("gpu-02", "test")
    synced()

    samples = scrape()

    assert (
        samples['medbay_nodes{status="draining"}'] + samples['medbay_nodes{status="drained"}'] == 1
    )
    assert sum(v for k, v in samples.items() if k.startswith("medbay_nodes{")) == 7
    assert samples['medbay_gpus{health="healthy"}'] == 56
    assert samples['medbay_gpus{health="failed"}'] == 0


def test_remediation_runs_by_status_and_step_durations_as_a_histogram(synced):
    node = Node.objects.get(name="gpu-01")
    run = Remediation.objects.create(node=node, action="cordon", trigger="admin", reason="x")
    now = timezone.now()
    for seconds in (2, 100):
        RemediationStep.objects.create(
            remediation=run,
            index=0,
            name="drain",
            outcome="succeeded",
            started_at=now - timedelta(seconds=seconds),
            finished_at=now,
        )
    RemediationStep.objects.create(remediation=run, index=1, name="cordon", outcome="started")

    samples = scrape()

    assert samples['medbay_remediation_runs{status="proposed"}'] == 1
    assert samples['medbay_remediation_runs{status="succeeded"}'] == 0
    step = "medbay_remediation_step_duration_seconds"
    assert samples[f'{step}_bucket{{step="drain",le="1"}}'] == 0
    assert samples[f'{step}_bucket{{step="drain",le="5"}}'] == 1
    assert samples[f'{step}_bucket{{step="drain",le="300"}}'] == 2
    assert samples[f'{step}_bucket{{step="drain",le="+Inf"}}'] == 2
    assert samples[f'{step}_count{{step="drain"}}'] == 2
    assert samples[f'{step}_sum{{step="drain"}}'] == pytest.approx(102, abs=0.01)
    assert f'{step}_count{{step="cordon"}}' not in samples, "an unfinished step has no duration"


def test_open_breakers_are_reported_per_cluster_and_closed_ones_are_not(db):
    first = Cluster.objects.create(name="first")
    second = Cluster.objects.create(name="second")
    BreakerTrip.objects.create(cluster=first, partition="train", reason="too many failures")
    BreakerTrip.objects.create(cluster=second, partition="train", reason="too many failures")
    BreakerTrip.objects.create(
        cluster=first, partition="infer", reason="old", closed_at=timezone.now()
    )

    samples = scrape()

    assert samples["medbay_breakers_open"] == 2
    assert samples['medbay_breaker_open{cluster="first",scope="train"}'] == 1
    assert samples['medbay_breaker_open{cluster="second",scope="train"}'] == 1
    assert 'medbay_breaker_open{cluster="first",scope="infer"}' not in samples


def test_sync_lag_and_controller_state_per_cluster(db):
    Cluster.objects.create(
        name="fresh", last_sync_at=timezone.now() - timedelta(seconds=30), controller_up=False
    )
    Cluster.objects.create(name="never")

    samples = scrape()

    assert samples['medbay_sync_lag_seconds{cluster="fresh"}'] == pytest.approx(30, abs=5)
    assert math.isinf(samples['medbay_sync_lag_seconds{cluster="never"}'])
    assert samples['medbay_controller_up{cluster="fresh"}'] == 0
    assert samples['medbay_controller_up{cluster="never"}'] == 1


def test_ingested_health_events_count_repeats(synced):
    token = NodeToken.issue(Node.objects.get(name="gpu-01"))[1]
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    at = timezone.now()
    events = [
        {"id": f"e{n}", "kind": "xid", "observed_at": (at + timedelta(seconds=n)).isoformat(),
         "xid": 13, "pci": "0000:18:00", "message": "Graphics Engine Exception"}
        for n in range(3)
    ]  # fmt: skip
    assert agent.post("/api/v1/health/events/", {"node": "gpu-01", "events": events}, "json")

    samples = scrape()

    ingested = {k: v for k, v in samples.items() if k.startswith("medbay_health_events_ingested")}
    assert sum(ingested.values()) == 3
    assert all('kind="xid"' in key for key in ingested)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """`sinfo` that answers after a moment and `scontrol` that always fails, on PATH."""
    scripts = {
        "sinfo": "#!/bin/sh\nsleep 0.06\necho 'slurm 22.05.8'\n",
        "scontrol": "#!/bin/sh\necho 'scontrol: error: Invalid node name' >&2\nexit 1\n",
    }
    for name, body in scripts.items():
        path = tmp_path / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return SlurmBackend(slurm_conf="")


def test_slurm_command_latency_and_errors_are_counted_per_tool(db, fake_slurm):
    fake_slurm.run(["sinfo", "--version"])
    fake_slurm.run(["sinfo", "--version"])
    with pytest.raises(BackendError):
        fake_slurm.run(["scontrol", "update", "nodename=nope", "state=resume"])

    samples = scrape()

    latency = "medbay_slurm_command_duration_seconds"
    assert samples[f'{latency}_count{{command="sinfo"}}'] == 2
    assert samples[f'{latency}_bucket{{command="sinfo",le="0.05"}}'] == 0
    assert samples[f'{latency}_bucket{{command="sinfo",le="+Inf"}}'] == 2
    assert samples[f'{latency}_sum{{command="sinfo"}}'] >= 0.12
    assert samples['medbay_slurm_command_errors_total{command="sinfo"}'] == 0
    assert samples['medbay_slurm_command_errors_total{command="scontrol"}'] == 1


def test_another_address_is_refused(db):
    response = Client().get("/metrics", REMOTE_ADDR="10.1.2.3")

    assert response.status_code == 403
    assert "MEDBAY_METRICS_ALLOW" in response.content.decode()


def test_an_allowed_network_and_ipv4_mapped_addresses_are_let_in(db, settings):
    settings.MEDBAY_METRICS_ALLOW = ["10.1.0.0/16"]

    assert Client().get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert Client().get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_the_bearer_token_lets_any_address_in_and_a_wrong_one_does_not(db, settings):
    settings.MEDBAY_METRICS_TOKEN = "s3cret-scrape-token"
    client = Client(REMOTE_ADDR="10.9.9.9")

    assert (
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").status_code == 200
    )
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer guess").status_code == 403
    assert client.get("/metrics").status_code == 403


def test_no_token_configured_means_no_bearer_gets_in(db, settings):
    settings.MEDBAY_METRICS_TOKEN = ""

    response = Client().get("/metrics", REMOTE_ADDR="10.9.9.9", HTTP_AUTHORIZATION="Bearer ")

    assert response.status_code == 403


def test_metrics_are_read_only(db):
    assert Client().post("/metrics").status_code == 405
