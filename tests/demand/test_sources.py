"""The demand signals: each source, what it reads, and why a figure is missing."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from clusters.backends.base import JobSubmission
from clusters.backends.kubernetes import KubernetesFleet
from demand import prometheus
from demand.models import DemandSample, Metric
from demand.sampling import sample
from demand.sources import (
    KubernetesInference,
    NoLoad,
    PoolSizes,
    PrometheusLoad,
    SlurmInferenceQueue,
    SlurmTrainingQueue,
    sources_for,
)
from tests.clusters.fake_apiserver import FakeApiServer
from tests.demand.fake_prometheus import bad_data, vector

pytestmark = pytest.mark.django_db

BIG_JOB = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:8\nx\n"


def values(rows, scope=None) -> dict:
    return {
        row.metric: (row.value if row.value is not None else row.missing)
        for row in rows
        if scope is None or row.scope == scope
    }


def test_the_training_queue_counts_pending_gpus_the_longest_wait_and_slurms_expected_start(
    sim, synced, cluster
):
    sim.submit_job(JobSubmission(script=BIG_JOB, user="alice"))  # takes all four nodes
    synced(timedelta(seconds=1))
    sim.submit_job(JobSubmission(script=BIG_JOB, user="bob"))  # waits for the first
    synced(timedelta(minutes=10))

    rows = sample(cluster, sim, sim, now=sim.now, sources=[SlurmTrainingQueue()])

    train = values(rows, "train")
    assert train[Metric.TRAINING_PENDING_JOBS] == 1
    assert train[Metric.TRAINING_PENDING_NODES] == 4
    assert train[Metric.TRAINING_PENDING_GPUS] == 32
    assert train[Metric.TRAINING_LONGEST_WAIT_S] == pytest.approx(600, abs=2)
    # The simulator expects it to start when the first job's four nodes free up.
    assert train[Metric.TRAINING_EXPECTED_START_S] > 0


def test_an_empty_training_queue_has_no_expected_start_and_says_so(sim, synced, cluster):
    rows = sample(cluster, sim, sim, now=sim.now, sources=[SlurmTrainingQueue()])

    train = values(rows, "train")
    assert train[Metric.TRAINING_PENDING_JOBS] == 0
    assert train[Metric.TRAINING_EXPECTED_START_S] == "no training job is pending"


def test_the_inference_queue_reads_the_inference_partitions_pending_and_allocated_nodes(
    sim, synced, cluster
):
    serve = "#!/bin/bash\n#SBATCH --partition=infer\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:8\nx\n"
    sim.submit_job(JobSubmission(script=serve, user="svc"))
    sim.submit_job(JobSubmission(script=serve, user="svc"))
    synced(timedelta(seconds=1))

    rows = sample(cluster, sim, sim, now=sim.now, sources=[SlurmInferenceQueue()])

    assert values(rows, "infer") == {
        Metric.INFERENCE_PENDING_JOBS: 1,
        Metric.INFERENCE_PENDING_NODES: 1,
        Metric.INFERENCE_ALLOCATED_NODES: 1,
    }


def test_pool_sizes_count_each_pools_nodes_and_those_running_jobs(sim, synced, cluster):
    sim.submit_job(JobSubmission(script=BIG_JOB, user="alice"))
    synced(timedelta(seconds=1))

    rows = sample(cluster, sim, sim, now=sim.now, sources=[PoolSizes()])

    sizes = {(row.metric, row.scope): row.value for row in rows}
    assert sizes[(Metric.POOL_NODES, "training")] == 4
    assert sizes[(Metric.POOL_BUSY_NODES, "training")] == 4
    assert sizes[(Metric.POOL_NODES, "inference")] == 1
    assert sizes[(Metric.POOL_NODES, "spare")] == 2


def test_every_sample_of_a_pass_is_stored_at_one_moment(sim, synced, cluster):
    rows = sample(cluster, sim, sim, now=sim.now)

    stored = DemandSample.objects.filter(cluster=cluster)
    assert stored.count() == len(rows) > 0
    assert {row.sampled_at for row in stored} == {sim.now}


# ------------------------------------------------------------------ the inference load
def load_of(cluster, source) -> DemandSample:
    (row,) = sample(cluster, None, None, sources=[source])
    assert row.metric == Metric.INFERENCE_LOAD
    return row


def test_the_sites_promql_query_gives_the_inference_load(fake_prometheus, cluster):
    fake_prometheus.answer = lambda query: (200, vector(412.5))
    query = 'histogram_quantile(0.95, rate(latency_bucket{cluster="{cluster}"}[5m]))'

    row = load_of(cluster, PrometheusLoad(fake_prometheus.url, query, "latency_ms"))

    assert (row.value, row.unit, row.missing) == (412.5, "latency_ms", "")
    assert fake_prometheus.queries == [query.replace("{cluster}", "test")]


def test_a_query_prometheus_cannot_parse_is_missing_and_says_the_query_does_not_parse(
    fake_prometheus, cluster
):
    message = 'invalid parameter "query": 1:14: parse error: unexpected ")"'
    fake_prometheus.answer = lambda query: (400, bad_data(message))

    row = load_of(cluster, PrometheusLoad(fake_prometheus.url, "rate(x[5m]))", "latency_ms"))

    assert row.value is None
    assert row.missing.startswith("the PromQL query does not parse")
    assert "unexpected" in row.missing


def test_prometheus_down_is_missing_and_names_the_address(cluster):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"

    row = load_of(cluster, PrometheusLoad(url, "up", "latency_ms", timeout_s=1))

    assert row.value is None
    assert row.missing.startswith(f"Prometheus at {url} is unreachable")


def test_a_query_without_series_is_missing_not_zero(fake_prometheus, cluster):
    fake_prometheus.answer = lambda query: (200, vector())

    row = load_of(cluster, PrometheusLoad(fake_prometheus.url, "serve_p95_ms", "latency_ms"))

    assert row.value is None
    assert "returned no series" in row.missing


def test_a_query_with_several_series_asks_for_one(fake_prometheus):
    fake_prometheus.answer = lambda query: (200, vector(1, 2, 3))

    result = prometheus.query_value(fake_prometheus.url, "serve_p95_ms")

    assert result.value is None
    assert "returned 3 series" in result.missing


def test_a_not_a_number_value_is_missing(fake_prometheus):
    fake_prometheus.answer = lambda query: (200, vector(float("nan")))

    assert prometheus.query_value(fake_prometheus.url, "x").value is None


def test_without_a_configured_load_the_simulator_gives_its_own_curve(settings, sim):
    settings.MEDBAY_DEMAND_PROMQL = ""

    names = [source.name for source in sources_for(sim, sim)]

    assert "backend-load" in names


def test_without_a_configured_load_a_slurm_cluster_says_what_to_configure(settings, cluster):
    settings.MEDBAY_DEMAND_PROMQL = ""

    (source,) = [s for s in sources_for(None, None) if s.name == "no-load"]
    row = load_of(cluster, source)

    assert "MEDBAY_DEMAND_PROMQL" in row.missing
    assert isinstance(source, NoLoad)


def test_with_a_configured_query_prometheus_is_asked(settings, sim):
    settings.MEDBAY_DEMAND_PROMETHEUS_URL = "http://prometheus:9090"
    settings.MEDBAY_DEMAND_PROMQL = "serve_p95_ms"

    names = [source.name for source in sources_for(sim, sim)]

    assert "prometheus" in names and "backend-load" not in names


# ------------------------------------------------------------------ Kubernetes
@pytest.fixture
def apiserver():
    server = FakeApiServer().start()
    yield server
    server.stop()


def k8s_fleet(server) -> KubernetesFleet:
    return KubernetesFleet(host=server.url, token=server.token, backoff_s=0.01)


def test_kubernetes_counts_pending_inference_pods_and_the_hpas_desired_replicas(apiserver, cluster):
    apiserver.add_node("gpu-01", pool="inference")
    serving = {"app": "llm-serve"}
    apiserver.add_pod("serve-a", "gpu-01", namespace="serving", labels=serving)
    for name in ("serve-b", "serve-c"):
        apiserver.add_pod(name, "", namespace="serving", labels=serving, phase="Pending")
    apiserver.add_pod("other", "", namespace="serving", labels={"app": "x"}, phase="Pending")
    apiserver.add_hpa("llm-serve", namespace="serving", desired=5, current=3)

    source = KubernetesInference("serving", "app=llm-serve", "llm-serve")
    rows = sample(cluster, None, k8s_fleet(apiserver), sources=[source])

    assert values(rows) == {
        Metric.K8S_PENDING_PODS: 2,
        Metric.K8S_DESIRED_REPLICAS: 5,
        Metric.K8S_CURRENT_REPLICAS: 3,
    }


def test_a_kubernetes_api_error_makes_every_kubernetes_figure_missing_with_the_error(
    apiserver, cluster
):
    apiserver.fail_next(403, path="/api/v1/namespaces/serving/pods")

    source = KubernetesInference("serving", "app=llm-serve", "llm-serve")
    rows = sample(cluster, None, k8s_fleet(apiserver), sources=[source])

    assert len(rows) == 3
    assert all(row.value is None for row in rows)
    assert all("not allowed (403)" in row.missing for row in rows)


def test_an_hpa_that_does_not_exist_is_an_error_not_zero_replicas(apiserver, cluster):
    source = KubernetesInference("serving", "app=llm-serve", "missing-hpa")
    rows = sample(cluster, None, k8s_fleet(apiserver), sources=[source])

    assert all(row.value is None for row in rows)
    assert "missing-hpa" in rows[0].missing


def test_a_fleet_that_is_not_kubernetes_has_no_kubernetes_figures(sim, cluster):
    rows = sample(cluster, sim, sim, sources=[KubernetesInference("serving", "", "")])

    assert {row.missing for row in rows} == {"the fleet is not Kubernetes"}
