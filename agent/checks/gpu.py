"""GPU checks built on `nvidia-smi -q -x` (§3 of reference/gpu-faults.md)."""

from agent.checks.base import (
    Check,
    CheckContext,
    Mode,
    Verdict,
    failed,
    passed,
    skipped,
    warned,
)
from agent.checks.slurm import gres_gpu_count, slurm_node

# Clock event reasons that mean the hardware itself is cutting clocks (cooling or power).
HARDWARE_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

# GPU Recovery Action words (nvidia-smi) and how bad each is; DCGM treats them the same way.
RECOVERY_FAILURES = {"reset", "reboot", "drain and reset", "gpu reset required"}
RECOVERY_WARNINGS = {"drain p2p"}


def probe_nvidia_smi(ctx: CheckContext, timeout_s: float) -> Verdict:
    report = ctx.nvsmi_report(timeout_s)
    return passed(
        f"nvidia-smi answered: {len(report.gpus)} GPU(s), driver {report.driver_version}",
        gpus=len(report.gpus),
        driver_version=report.driver_version,
    )


def expected_gpu_count(ctx: CheckContext, timeout_s: float) -> tuple[int | None, str]:
    configured = ctx.config.get("expected_gpus")
    if configured is not None:
        return int(configured), "config"
    node = slurm_node(ctx, timeout_s)
    return gres_gpu_count(node.get("Gres") if node else None), "slurm gres"


def probe_gpu_count(ctx: CheckContext, timeout_s: float) -> Verdict:
    expected, source = expected_gpu_count(ctx, timeout_s)
    if expected is None:
        return skipped("expected GPU count unknown (set expected_gpus or run under Slurm)")
    found = len(ctx.nvsmi_report(timeout_s).gpus)
    if found != expected:
        return failed(f"found {found} GPUs, expected {expected} ({source})", found=found)
    return passed(f"{found} GPUs as expected", found=found)


def gpu_memory_problems(gpu) -> tuple[list[str], list[str]]:
    """(failures, warnings) about one GPU's ECC, row remapping and recovery state."""
    label = f"GPU {gpu.index} ({gpu.pci})"
    failures, warnings = [], []
    if gpu.volatile_dbe:
        failures.append(f"{label}: {gpu.volatile_dbe} volatile uncorrectable ECC error(s)")
    if gpu.remap_failure:
        failures.append(f"{label}: row remapping failed")
    if gpu.sram_threshold_exceeded:
        failures.append(f"{label}: SRAM threshold exceeded")
    if gpu.reset_required:
        failures.append(f"{label}: GPU reset required")
    action = (gpu.recovery_action or "").lower()
    if action in RECOVERY_FAILURES:
        failures.append(f"{label}: recovery action {gpu.recovery_action}")
    elif action in RECOVERY_WARNINGS:
        warnings.append(f"{label}: recovery action {gpu.recovery_action}")
    if gpu.remap_pending:
        warnings.append(f"{label}: row remap pending (reset to apply)")
    if gpu.retired_pages_pending:
        warnings.append(f"{label}: page retirement pending")
    return failures, warnings


def probe_ecc_remap(ctx: CheckContext, timeout_s: float) -> Verdict:
    failures, warnings = [], []
    for gpu in ctx.nvsmi_report(timeout_s).gpus:
        gpu_failures, gpu_warnings = gpu_memory_problems(gpu)
        failures += gpu_failures
        warnings += gpu_warnings
    if failures:
        return failed("; ".join(failures), warnings=warnings)
    if warnings:
        return warned("; ".join(warnings))
    return passed("no uncorrectable ECC errors, no remap pending or failed")


def probe_throttle(ctx: CheckContext, timeout_s: float) -> Verdict:
    throttled = {
        gpu.index: [reason for reason in gpu.clocks_event_reasons if reason in HARDWARE_SLOWDOWNS]
        for gpu in ctx.nvsmi_report(timeout_s).gpus
    }
    throttled = {index: reasons for index, reasons in throttled.items() if reasons}
    if throttled:
        described = "; ".join(f"GPU {i}: {', '.join(r)}" for i, r in throttled.items())
        return warned(f"hardware clock slowdown: {described}", gpus=sorted(throttled))
    return passed("no hardware clock slowdown")


NVIDIA_SMI_RESPONDS = Check(
    "nvidia_smi_responds", "driver loaded, GPUs reachable, nvidia-smi not hung",
    Mode.PASSIVE, 20.0, probe_nvidia_smi,
)  # fmt: skip
GPU_COUNT = Check(
    "gpu_count", "GPUs missing compared with config or Slurm GRES",
    Mode.PASSIVE, 20.0, probe_gpu_count,
)  # fmt: skip
ECC_REMAP = Check(
    "ecc_remap", "volatile DBE, row-remap failure/pending, SRAM threshold, recovery action",
    Mode.PASSIVE, 20.0, probe_ecc_remap,
)  # fmt: skip
THROTTLE = Check(
    "throttle", "hardware, thermal or power-brake clock slowdown",
    Mode.PASSIVE, 20.0, probe_throttle,
)  # fmt: skip
