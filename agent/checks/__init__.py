"""Node health checks: passive ones run beside jobs, active ones need an idle node."""

from agent.checks.base import (
    Check,
    CheckContext,
    CheckResult,
    CheckStatus,
    CommandOutput,
    Mode,
    run_checks,
)
from agent.checks.dcgm import DCGM_DIAG, DCGM_HEALTH
from agent.checks.deep import MEMORY_STRESS, NCCL_ALLREDUCE, NVLINK
from agent.checks.gpu import ECC_REMAP, GPU_COUNT, NVIDIA_SMI_RESPONDS, THROTTLE
from agent.checks.system import CPU_STRESS, DISK_FREE, FORCE_DRAIN, INFINIBAND, MEMORY

ALL_CHECKS = {
    check.name: check
    for check in (
        FORCE_DRAIN,
        NVIDIA_SMI_RESPONDS,
        GPU_COUNT,
        ECC_REMAP,
        THROTTLE,
        INFINIBAND,
        DISK_FREE,
        MEMORY,
        DCGM_HEALTH,
        DCGM_DIAG,
        CPU_STRESS,
        NVLINK,
        MEMORY_STRESS,
        NCCL_ALLREDUCE,
    )
}

# Bounded well under Slurm's 60 s HealthCheckProgram limit; the rest are opt-in.
DEFAULT_CHECKS = (
    "force_drain",
    "nvidia_smi_responds",
    "gpu_count",
    "ecc_remap",
    "throttle",
    "infiniband",
    "disk_free",
    "memory",
)

# What a node passes before it takes jobs again, held in a maintenance reservation
# (`medbay-agent check --once --deep`): GPU count against GRES, ECC and remapping,
# NVLink and InfiniBand ports, DCGM diagnostics at DEEP_DCGM_LEVEL, CPU and memory
# stress, and an NCCL all-reduce. Each skips, with its reason, where its tool is missing.
DEEP_CHECKS = (
    "force_drain",
    "nvidia_smi_responds",
    "gpu_count",
    "ecc_remap",
    "nvlink",
    "infiniband",
    "disk_free",
    "memory",
    "dcgm_diag",
    "cpu_stress",
    "memory_stress",
    "nccl_allreduce",
)
DEEP_DCGM_LEVEL = 2


def select_checks(names: list[str] | None = None) -> list[Check]:
    """Checks by name in the given order; unknown names raise KeyError with the name."""
    return [ALL_CHECKS[name] for name in (names or DEFAULT_CHECKS)]


__all__ = [
    "ALL_CHECKS",
    "DEEP_CHECKS",
    "DEEP_DCGM_LEVEL",
    "DEFAULT_CHECKS",
    "Check",
    "CheckContext",
    "CheckResult",
    "CheckStatus",
    "CommandOutput",
    "Mode",
    "run_checks",
    "select_checks",
]
