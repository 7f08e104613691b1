"""How Slurm's base state, flags and Medbay's pool fold into one board badge."""

from __future__ import annotations

from clusters.models import NodeStatus, PoolKind

BUSY_STATES = frozenset({"allocated", "mixed"})


def board_status(
    state: str, flags: set[str] | frozenset[str], pool_kind: str | None, remediation: str = ""
) -> str:
    if remediation == "replace":
        return NodeStatus.REPLACING
    # Order matters: Slurm shows DRAIN over FAIL in compact form, but for an
    # operator "fail" (hardware out of service) is the more important fact.
    if "fail" in flags:
        return NodeStatus.FAIL
    if state == "down":
        return NodeStatus.DOWN
    if "drain" in flags:
        busy = state in BUSY_STATES or "completing" in flags
        return NodeStatus.DRAINING if busy else NodeStatus.DRAINED
    if state == "unknown" or state == "future":
        return NodeStatus.UNKNOWN
    if pool_kind == PoolKind.SPARE and state == "idle":
        return NodeStatus.SPARE
    if pool_kind == PoolKind.INFERENCE:
        return NodeStatus.INFERENCE
    return {
        "idle": NodeStatus.IDLE,
        "allocated": NodeStatus.ALLOCATED,
        "mixed": NodeStatus.MIXED,
    }.get(state, NodeStatus.UNKNOWN)


POOL_FOR_PARTITION = {
    "train": PoolKind.TRAINING,
    "training": PoolKind.TRAINING,
    "infer": PoolKind.INFERENCE,
    "inference": PoolKind.INFERENCE,
    "spare": PoolKind.SPARE,
}
