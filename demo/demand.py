"""The demo's reallocation policy: on, in approval mode, quick to conclude.

Simulated time runs 60 times faster than ours, so a demo day is 24 minutes and a
training job waits a minute or two, not hours: the policy's waits and hysteresis are
set for that, so that a proposal with its evidence is in the approval queue within a
few minutes of `make demo`.
"""

from __future__ import annotations

from clusters.models import Cluster, Node, NodePool, PoolKind
from demand.models import ReallocationPolicy
from demand.policies import save_policy
from identity.accounts import get_user


def create_demo_policy(cluster: Cluster, admin: str = "admin") -> ReallocationPolicy | None:
    """The policy, saved by the demo's admin (created first: `create_demo_users`)."""
    pools = {pool.kind: pool for pool in NodePool.objects.filter(cluster=cluster)}
    if PoolKind.TRAINING not in pools or PoolKind.INFERENCE not in pools:
        return None
    sizes = {kind: Node.objects.filter(pool=pool).count() for kind, pool in pools.items()}
    policy = ReallocationPolicy(
        cluster=cluster,
        training_pool=pools[PoolKind.TRAINING],
        inference_pool=pools[PoolKind.INFERENCE],
        enabled=True,
        mode="approval",
        # Each pool keeps a few nodes, but never all it has (`--nodes 4` has one of each).
        training_min_nodes=max(0, min(4, sizes[PoolKind.TRAINING] - 1)),
        inference_min_nodes=max(0, min(2, sizes[PoolKind.INFERENCE] - 1)),
        training_max_wait_s=60,
        hysteresis_s=60,
        cooldown_s=600,
        max_moves_per_hour=6,
        stale_after_s=180,
    )
    return save_policy(policy, user=get_user(admin))
