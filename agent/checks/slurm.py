"""What Slurm says this node should have (`scontrol show node`), for the count checks."""

import re
import subprocess

from agent.checks.base import CheckContext, ToolMissing

_GRES_GPU_RE = re.compile(r"\bgpu(?::[^:,(]+)?:(\d+)")


def slurm_node(ctx: CheckContext, timeout_s: float) -> dict[str, str] | None:
    """`scontrol -o show node <this node>` as a dict, or None when Slurm cannot tell us."""
    if "slurm_node" not in ctx.cache:
        ctx.cache["slurm_node"] = _query_slurm_node(ctx, timeout_s)
    return ctx.cache["slurm_node"]


def _query_slurm_node(ctx: CheckContext, timeout_s: float) -> dict[str, str] | None:
    name = ctx.node_name()
    if not name:
        return None
    try:
        output = ctx.run_tool("scontrol", ["-o", "show", "node", name], timeout_s)
    except (ToolMissing, subprocess.TimeoutExpired):
        return None
    if output.returncode != 0:
        return None
    return parse_node_line(output.stdout)


def parse_node_line(text: str) -> dict[str, str]:
    """`Key=Value` pairs of `scontrol show node` output (one-line or multi-line form)."""
    fields = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def gres_gpu_count(gres: str | None) -> int | None:
    """Total GPUs in a Gres string like `gpu:h100:8(S:0-1)`; None when it lists no GPU."""
    counts = [int(count) for count in _GRES_GPU_RE.findall(gres or "")]
    return sum(counts) if counts else None
