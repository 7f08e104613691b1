"""Nodes and partitions from `sinfo --json` and `scontrol show node|partition --json`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from clusters.backends.base import (
    NodeInfo,
    PartitionInfo,
)
from clusters.backends.slurm_parsers.values import (
    epoch_to_datetime,
    gpu_count,
    gpu_model,
    plain_number,
    split_node_state,
    text_or_empty,
    tres_gpus,
)
from clusters.backends.slurm_syntax import expand_hostlist

# ---------------------------------------------------------------- JSON nodes


def node_state_tokens(raw: Mapping[str, Any]) -> list[str]:
    """22.05 splits the state into `state` + `state_flags`; 24.11 uses one array."""
    state = raw.get("state", "")
    tokens = list(state) if isinstance(state, list) else [str(state)]
    return tokens + list(raw.get("state_flags") or [])


def node_from_json(raw: Mapping[str, Any]) -> NodeInfo:
    base, flags = split_node_state(node_state_tokens(raw))
    gres = raw.get("gres", "")
    return NodeInfo(
        name=raw.get("name", ""),
        state=base,
        flags=flags,
        reason=text_or_empty(raw.get("reason")),
        partitions=tuple(raw.get("partitions") or ()),
        cpus=plain_number(raw.get("cpus")) or 0,
        memory_mb=plain_number(raw.get("real_memory")) or 0,
        gpus=gpu_count(gres),
        gpu_model=gpu_model(gres),
        gpus_used=gpu_count(raw.get("gres_used")),
        reason_set_at=epoch_to_datetime(raw.get("reason_changed_at")),
        reason_set_by=text_or_empty(raw.get("reason_set_by_user")),
    )


def parse_nodes_json(document: Mapping[str, Any]) -> list[NodeInfo]:
    """Nodes from `scontrol show node --json`, 22.05 `sinfo --json`, 24.11
    `sinfo --json` (grouped records) or slurmrestd's `/nodes`."""
    if "sinfo" in document:
        return nodes_from_sinfo_groups(document["sinfo"])
    return [node_from_json(raw) for raw in document.get("nodes", [])]


def nodes_from_sinfo_groups(groups: Iterable[Mapping[str, Any]]) -> list[NodeInfo]:
    """24.11 `sinfo --json` lists (partition, state) groups; a node in two
    partitions appears twice, so merge by name keeping sinfo's order."""
    merged: dict[str, NodeInfo] = {}
    for group in groups:
        for name in group.get("nodes", {}).get("nodes", []):
            node = node_from_sinfo_group(name, group)
            previous = merged.get(name)
            if previous is not None:
                node = NodeInfo(
                    **{**previous.__dict__, "partitions": previous.partitions + node.partitions}
                )
            merged[name] = node
    return list(merged.values())


def node_from_sinfo_group(name: str, group: Mapping[str, Any]) -> NodeInfo:
    base, flags = split_node_state(group.get("node", {}).get("state", []))
    reason = group.get("reason") or {}
    gres = group.get("gres") or {}
    partition = (group.get("partition") or {}).get("name", "")
    return NodeInfo(
        name=name,
        state=base,
        flags=flags,
        reason=text_or_empty(reason.get("description")),
        partitions=(partition,) if partition else (),
        cpus=plain_number(group.get("cpus", {}).get("maximum")) or 0,
        memory_mb=plain_number(group.get("memory", {}).get("maximum")) or 0,
        gpus=gpu_count(gres.get("total")),
        gpu_model=gpu_model(gres.get("total")),
        gpus_used=gpu_count(gres.get("used")),
        reason_set_at=epoch_to_datetime(reason.get("time")),
        reason_set_by=text_or_empty(reason.get("user")),
    )


# ---------------------------------------------------------------- JSON partitions


def partition_from_json(raw: Mapping[str, Any]) -> PartitionInfo:
    """24.11's `scontrol show partition --json` (nested) or 22.05 slurmrestd
    v0.0.38 (flat). 24.11's JSON does not say which partition is the default,
    so callers needing `default` use `scontrol -o show partition` text."""
    if isinstance(raw.get("nodes"), Mapping):
        return PartitionInfo(
            name=raw.get("name", ""),
            nodes=expand_hostlist(raw["nodes"].get("configured")),
            max_time_minutes=plain_number(raw.get("maximums", {}).get("time")),
            max_nodes=plain_number(raw.get("maximums", {}).get("nodes")),
            default="DEFAULT" in (raw.get("flags") or []),
            state=str((raw.get("partition", {}).get("state") or ["UP"])[0]).lower(),
            total_gpus=tres_gpus(raw.get("tres", {}).get("configured")) or 0,
        )
    return PartitionInfo(
        name=raw.get("name", ""),
        nodes=expand_hostlist(raw.get("nodes")),
        max_time_minutes=non_negative(raw.get("max_time_limit")),
        max_nodes=non_negative(raw.get("maximum_nodes_per_job")),
        default="default" in [flag.lower() for flag in raw.get("flags") or []],
        state=str(raw.get("state", "UP")).lower(),
        total_gpus=tres_gpus(raw.get("tres")) or 0,
    )


def non_negative(value: Any) -> int | None:
    """v0.0.38 uses -1 for unlimited."""
    number = plain_number(value)
    return None if number is None or number < 0 else number


def parse_partitions_json(document: Mapping[str, Any]) -> list[PartitionInfo]:
    return [partition_from_json(raw) for raw in document.get("partitions", [])]
