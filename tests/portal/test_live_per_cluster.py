"""The live layer sends a cluster's changes only to pages that show that cluster, and
to pages that show all clusters (issue 32)."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from clusters.backends import registry
from clusters.config import ClusterConfig
from clusters.configure import add_cluster
from portal.consumers import LiveConsumer
from sync.cycle import apply_snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(user, topics: str) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topics={topics}")
    comm.scope["user"] = user
    return comm


def second_cluster():
    cluster = add_cluster("second", ClusterConfig(), by="test")
    backend = registry.backend_for(cluster)
    backend.fault_rate_per_gpu_day = 0
    apply_snapshot(cluster, backend.partitions(), backend.nodes(), backend.jobs())
    return cluster, backend


async def test_a_board_of_one_cluster_gets_nothing_of_another_clusters_change(
    researcher, sim, synced
):
    second, second_sim = await database_sync_to_async(second_cluster)()
    on_test = communicator(researcher, "board:test")
    node_page = communicator(researcher, "node:test:gpu-02")
    on_second = communicator(researcher, "board:second")
    on_all = communicator(researcher, "board")
    for comm in (on_test, node_page, on_second, on_all):
        assert (await comm.connect())[0]

    second_sim.drain_node("gpu-02", "only on second")
    await database_sync_to_async(apply_snapshot)(
        second, second_sim.partitions(), second_sim.nodes(), second_sim.jobs()
    )

    tile = await on_second.receive_from(timeout=2)
    assert 'id="node-gpu-02"' in tile and "status-drained" in tile
    everywhere = await on_all.receive_from(timeout=2)
    assert 'id="node-second-gpu-02"' in everywhere  # all clusters: tiles named by cluster
    await asyncio.sleep(0.1)
    assert await on_test.receive_nothing(timeout=0.3)
    assert await node_page.receive_nothing(timeout=0.3)
    for comm in (on_test, node_page, on_second, on_all):
        await comm.disconnect()


async def test_a_queue_of_one_cluster_is_not_poked_for_another_clusters_jobs(
    researcher, sim, synced
):
    from clusters.backends.base import JobSubmission

    second, second_sim = await database_sync_to_async(second_cluster)()
    on_test = communicator(researcher, "jobs:test")
    on_second = communicator(researcher, "jobs:second")
    for comm in (on_test, on_second):
        assert (await comm.connect())[0]

    script = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=1\nsrun sleep 600\n"
    second_sim.submit_job(JobSubmission(script=script, user="alice"))
    await database_sync_to_async(apply_snapshot)(
        second, second_sim.partitions(), second_sim.nodes(), second_sim.jobs()
    )

    assert await on_second.receive_from(timeout=2) == '{"poke": ["jobs"]}'
    assert await on_test.receive_nothing(timeout=0.3)
    for comm in (on_test, on_second):
        await comm.disconnect()


async def test_a_topic_naming_an_unknown_cluster_joins_nothing(researcher, sim, synced):
    comm = communicator(researcher, "board:nowhere")
    connected, code = await comm.connect()
    assert not connected and code == 4403
