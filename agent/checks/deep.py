"""The deep checks a node passes before it takes jobs again (after a reboot, a return
to service or as a replacement), run while Medbay holds it in a maintenance
reservation, as HyperPod's deep health checks are: NVLink links up, memory under a
write-and-verify load, and an NCCL all-reduce across the node's GPUs. A tool that is
not installed makes its check skip, with the reason; it never passes."""

import re
import subprocess

from agent.checks.base import (
    Check,
    CheckContext,
    CheckResult,
    CheckStatus,
    Mode,
    ToolMissing,
    Verdict,
    failed,
    passed,
    skipped,
    warned,
)

# `nvidia-smi nvlink -s`: "GPU 0: NVIDIA H100 ... (UUID: ...)" then "\t Link 0: 26.562 GB/s"
# per link, "<inactive>" for a link that is down.
GPU_LINE = re.compile(r"^GPU (\d+):")
LINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.+?)\s*$")
# nccl-tests print "# Out of bounds values : 0 OK" and "# Avg bus bandwidth : 123.4".
OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
AVG_BUS_BANDWIDTH = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
MEMORY_PATTERN = bytes(range(256))
# Medbay holds a node for its checks in a maintenance reservation of this name; the
# portal reads it from here (clusters.backends.capabilities.CHECK_HOLD_PREFIX).
HOLD_PREFIX = "medbay-check-"
HOLD_START = re.compile(r"ReservationName=(\S+)\s.*?StartTime=(\S+)")
# The one check event that says the node passed (or failed) its deep checks as a whole:
# what the portal's validation waits for while it holds the node.
DEEP_SUMMARY = "deep_checks"


def nvlink_links(text: str) -> dict[int, dict[int, str]]:
    """GPU index -> link index -> what nvidia-smi says of it ("26.562 GB/s", "<inactive>")."""
    links: dict[int, dict[int, str]] = {}
    gpu = None
    for line in text.splitlines():
        if match := GPU_LINE.match(line):
            gpu = int(match.group(1))
            links.setdefault(gpu, {})
        elif (match := LINK_LINE.match(line)) and gpu is not None:
            links[gpu][int(match.group(1))] = match.group(2)
    return links


def probe_nvlink(ctx: CheckContext, timeout_s: float) -> Verdict:
    output = ctx.run_tool("nvidia-smi", ["nvlink", "-s"], timeout_s)
    if output.returncode != 0:
        return failed(f"nvidia-smi nvlink -s exited {output.returncode}: {output.stderr.strip()}")
    links = nvlink_links(output.stdout)
    count = sum(len(per_gpu) for per_gpu in links.values())
    if not count:
        return skipped("no NVLink links on this node (nvidia-smi nvlink -s lists none)")
    down = [
        f"GPU {gpu} link {link}"
        for gpu, per_gpu in sorted(links.items())
        for link, state in sorted(per_gpu.items())
        if _inactive(state)
    ]
    expected = ctx.section("nvlink").get("expected_links")
    if expected is not None:
        short = [
            f"GPU {gpu}: {sum(not _inactive(s) for s in per_gpu.values())} of {expected}"
            for gpu, per_gpu in sorted(links.items())
            if sum(not _inactive(state) for state in per_gpu.values()) < int(expected)
        ]
        if short:
            return failed(f"NVLink links up below {expected} per GPU: {'; '.join(short)}")
    elif len(down) == count:
        # A GPU alone in a VM, or a board whose NVLink is not wired: nothing to compare
        # with. A site whose nodes must have links says how many ([nvlink] expected_links).
        return warned(
            f"no NVLink link is up on any of {len(links)} GPU(s); set [nvlink] expected_links "
            "where this node should have them"
        )
    if down:
        return failed(f"NVLink down: {', '.join(down)}", down=down)
    return passed(f"{count} NVLink link(s) up on {len(links)} GPU(s)", links=count)


def _inactive(state: str) -> bool:
    lowered = state.lower()
    return "inactive" in lowered or lowered in ("down", "0 gb/s")


def probe_memory_stress(ctx: CheckContext, timeout_s: float) -> Verdict:
    mib = int(ctx.section("memory_stress").get("mib", 256))
    try:
        block = bytearray(MEMORY_PATTERN * (mib * 4096))
    except MemoryError:
        return failed(f"could not allocate {mib} MiB")
    if block.count(MEMORY_PATTERN[:1]) != mib * 4096:
        return failed(f"{mib} MiB written and read back differ")
    inverted = bytes(255 - b for b in MEMORY_PATTERN)
    block[:] = inverted * (mib * 4096)
    if bytes(block[: len(inverted)]) != inverted or block.count(inverted[:1]) != mib * 4096:
        return failed(f"{mib} MiB written and read back differ (inverted pattern)")
    return passed(f"{mib} MiB written and verified twice", mib=mib)


def probe_nccl_allreduce(ctx: CheckContext, timeout_s: float) -> Verdict:
    section = ctx.section("nccl")
    gpus = section.get("gpus")
    if gpus is None:
        gpus = len(ctx.nvsmi_report(timeout_s).gpus)
    if not gpus:
        return skipped("no GPUs for an NCCL all-reduce")
    args = ["-b", "8M", "-e", str(section.get("max_bytes", "256M")), "-f", "2", "-g", str(gpus)]
    try:
        output = ctx.run_tool("all_reduce_perf", args, timeout_s)
    except subprocess.TimeoutExpired:
        return failed(f"all_reduce_perf did not finish within {timeout_s:g}s")
    wrong = OUT_OF_BOUNDS.search(output.stdout)
    if output.returncode != 0:
        return failed(f"all_reduce_perf exited {output.returncode}: {output.stderr.strip()[:200]}")
    if wrong is None or int(wrong.group(1)):
        found = wrong.group(1) if wrong else "no"
        return failed(f"NCCL all-reduce gave {found} out-of-bounds value(s)")
    bandwidth = AVG_BUS_BANDWIDTH.search(output.stdout)
    busbw = float(bandwidth.group(1)) if bandwidth else 0.0
    floor = float(section.get("min_busbw_gbps", 0))
    if busbw < floor:
        return failed(f"NCCL all-reduce bus bandwidth {busbw:g} GB/s below {floor:g}")
    return passed(f"NCCL all-reduce on {gpus} GPU(s): {busbw:g} GB/s bus bandwidth", busbw=busbw)


NVLINK = Check(
    "nvlink", "NVLink links down (nvidia-smi nvlink -s)", Mode.PASSIVE, 15.0, probe_nvlink
)
MEMORY_STRESS = Check(
    "memory_stress", "host memory that does not read back what was written",
    Mode.ACTIVE, 60.0, probe_memory_stress,
)  # fmt: skip
NCCL_ALLREDUCE = Check(
    "nccl_allreduce", "NCCL all-reduce across the node's GPUs (nccl-tests all_reduce_perf)",
    Mode.ACTIVE, 300.0, probe_nccl_allreduce,
)  # fmt: skip


def held_since(ctx: CheckContext, timeout_s: float = 10.0) -> str | None:
    """When Medbay's maintenance hold on this node started (Slurm's StartTime), or None
    when it holds none, or Slurm cannot say: the agent then runs its usual checks."""
    node = ctx.node_name()
    if not node:
        return None
    try:
        output = ctx.run_tool(
            "scontrol", ["show", f"reservation={HOLD_PREFIX}{node}", "--oneliner"], timeout_s
        )
    except (ToolMissing, OSError, subprocess.TimeoutExpired):
        return None
    found = HOLD_START.search(output.stdout) if output.returncode == 0 else None
    if found is None or found.group(1) != f"{HOLD_PREFIX}{node}":
        return None
    return found.group(2)


def deep_summary(results: list[CheckResult]) -> CheckResult:
    """The deep checks as one verdict: failed naming the first failure, else passed naming
    what was skipped and why (a skipped check never counts as passed)."""
    failures = [r for r in results if r.status == CheckStatus.FAIL]
    skipped_ones = [f"{r.name}: {r.message}" for r in results if r.status == CheckStatus.SKIP]
    ran = sum(r.status in (CheckStatus.PASS, CheckStatus.WARN) for r in results)
    if failures:
        first = failures[0]
        return CheckResult(DEEP_SUMMARY, CheckStatus.FAIL, f"{first.name}: {first.message}")
    message = f"{ran} deep check(s) passed"
    if skipped_ones:
        message += f"; skipped, with the reason: {'; '.join(skipped_ones)}"
    return CheckResult(DEEP_SUMMARY, CheckStatus.PASS, message, {"skipped": len(skipped_ones)})
