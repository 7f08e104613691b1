"""The Xid catalogue: what each NVIDIA Xid means and what Medbay does about it by default.

Source of truth: /work/shared/reference/gpu-faults.md (§1 table, §4 ladder and escalation rules).
`immediate` and `investigatory` are NVIDIA's catalog buckets copied as written; `None` means
the reference does not record that bucket for the code. `mnemonic` is empty where the
reference only gives the legacy description. This module imports nothing from Django: the
node agent uses it too.
"""

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Severity(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Rung(enum.StrEnum):
    """Remediation ladder rungs, mildest first (§4)."""

    IGNORE = "ignore"
    NOTIFY = "notify"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPLACE = "replace"


class Cause(enum.StrEnum):
    APPLICATION = "application"
    DRIVER = "driver"
    FIRMWARE = "firmware"
    MEMORY_ECC = "memory_ecc"
    HARDWARE = "hardware"
    PCIE = "pcie"
    NVLINK = "nvlink"
    INFORMATIONAL = "informational"
    UNKNOWN = "unknown"


RUNG_ORDER = tuple(Rung)

# The severity a rung implies unless an entry says otherwise.
SEVERITY_BY_RUNG = {
    Rung.IGNORE: Severity.INFO,
    Rung.NOTIFY: Severity.WARNING,
    Rung.RESTART_APP: Severity.WARNING,
    Rung.RESET_GPU: Severity.CRITICAL,
    Rung.REBOOT: Severity.CRITICAL,
    Rung.REPLACE: Severity.CRITICAL,
}

# nvmlDeviceGpuRecoveryAction_t, also used by Xid 154 lines (§2.1, §2.4).
RECOVERY_ACTIONS = {
    0: "None",
    1: "GPU Reset Required",
    2: "Node Reboot Required",
    3: "Drain P2P",
    4: "Drain and Reset",
}

RECOVERY_ACTION_RUNGS = {
    0: Rung.IGNORE,
    1: Rung.RESET_GPU,
    2: Rung.REBOOT,
    3: Rung.NOTIFY,
    4: Rung.RESET_GPU,
}


@dataclass(frozen=True)
class XidInfo:
    code: int
    mnemonic: str
    name: str
    meaning: str
    cause: Cause
    immediate: str | None
    investigatory: str | None
    severity: Severity
    rung: Rung
    notes: str = ""
    known: bool = True


def _entry(code, mnemonic, name, meaning, cause, immediate, investigatory, rung, **extra):
    severity = extra.pop("severity", SEVERITY_BY_RUNG[rung])
    return XidInfo(
        code=code,
        mnemonic=mnemonic,
        name=name,
        meaning=meaning,
        cause=cause,
        immediate=immediate,
        investigatory=investigatory,
        severity=severity,
        rung=rung,
        **extra,
    )


_LEGACY = "n/a on Ampere+ (catalog: unused on A100, H100, B100, GB200)."

# §1: the codes the reference describes in full.
# fmt: off
_TABLE = [
    _entry(8, "FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing",
           "A channel stopped making progress (timeout).",
           Cause.DRIVER, "RESTART_APP", "CONTACT_SUPPORT", Rung.RESTART_APP,
           notes="Causes: driver, application, bus, thermal."),
    _entry(13, "GR_EXCEPTION", "Graphics Engine Exception",
           "Fault raised by the compute/graphics engine, usually an application bug.",
           Cause.APPLICATION, "RESTART_APP", "WORKFLOW_XID_13", Rung.RESTART_APP,
           notes="Repeats on one GPU across different jobs justify DCGM r3 / field diag."),
    _entry(31, "FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault",
           "The GPU MMU saw an illegal address access.",
           Cause.APPLICATION, "RESTART_APP", "WORKFLOW_XID_31", Rung.RESTART_APP),
    _entry(32, "PBDMA_ERROR", "Invalid or corrupted push buffer stream",
           "The DMA engine carrying the driver command stream over PCIe reported a fault.",
           Cause.PCIE, "RESTART_APP", "CHECK_APP/CUDA", Rung.RESTART_APP),
    _entry(38, "FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error",
           "Firmware (FECS) watchdog fired.",
           Cause.FIRMWARE, "IGNORE", "CONTACT_SUPPORT", Rung.IGNORE,
           notes="DCGM's health module labels 38 'PCIe Bus Error'."),
    _entry(43, "RESETCHANNEL_VERIF_ERROR", "GPU stopped processing",
           "An app hit a software-induced fault and its channel was killed; GPU stays healthy.",
           Cause.APPLICATION, "IGNORE", "CONTACT_SUPPORT", Rung.IGNORE),
    _entry(45, "PREEMPTIVE_REMOVAL", "Preemptive cleanup",
           "Driver tore down an app's channels after an abort or after another error.",
           Cause.APPLICATION, "WORKFLOW_XID_45", "RESTART_FM (solo) / IGNORE (not solo)",
           Rung.IGNORE,
           notes="A lone 45 on NVSwitch systems can mean Fabric Manager exited."),
    _entry(46, "GPU_TIMEOUT_ERROR", "GPU stopped processing", "GPU timeout.",
           Cause.DRIVER, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
    _entry(48, "GPU_ECC_DBE", "Double-bit ECC error",
           "Uncorrectable memory error; clears only after GPU reset or node reboot.",
           Cause.MEMORY_ECC, "WORKFLOW_XID_48", "WORKFLOW_XID_48", Rung.RESET_GPU,
           notes="Followed by 63/64: drain and reset. Alone: field diagnostics."),
    _entry(56, "DISPLAY_CHANNEL_EXCEPTION", "Display engine error", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(57, "FB_LINK_TRAINING_FAILURE_ERROR", "Error programming video memory interface",
           _LEGACY, Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", _LEGACY,
           Cause.FIRMWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY,
           notes="Debug guidelines (older GPUs): report the issue and reset the GPU."),
    _entry(62, "PMU_HALT_ERROR", "Internal micro-controller halt",
           "On-GPU micro-controller halted.",
           Cause.HARDWARE, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
    _entry(63, "INFOROM_DRAM_RETIREMENT_EVENT", "Memory remapping event",
           "Driver recorded a row remap or page retirement after ECC errors.",
           Cause.MEMORY_ECC, "IGNORE", "IGNORE", Rung.IGNORE,
           notes="Act on the pending-remap state, not on the Xid."),
    _entry(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "Memory remapping failure",
           "Recording the remap or retirement failed.",
           Cause.MEMORY_ECC, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
    _entry(68, "NVDEC0_ERROR", "Video decoder exception", "Video decoder engine exception.",
           Cause.DRIVER, "RESTART_APP", "CONTACT_SUPPORT", Rung.RESTART_APP),
    _entry(69, "GR_CLASS_ERROR", "Graphics engine class error",
           "Bad class or method submitted to the engine.",
           Cause.DRIVER, "RESTART_APP", "CHECK_APP/CUDA", Rung.RESTART_APP),
    _entry(73, "NVENC2_ERROR", "Encoder error", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(74, "NVLINK_ERROR", "NVLink error",
           "Problem on an NVLink connection; reset or reboot needed. May be the remote end.",
           Cause.NVLINK, "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", Rung.RESET_GPU,
           notes="A100/H100 only; B100/GB200 use 144-150."),
    _entry(79, "GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
           "Driver cannot reach the GPU over PCIe at all.",
           Cause.PCIE, "RESTART_BM", "CONTACT_SUPPORT", Rung.REBOOT,
           notes="A GPU reset is impossible (device unreachable). Check PCIe AER and BMC."),
    _entry(81, "VGA_SUBSYSTEM_ERROR", "VGA subsystem error", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate",
           "Corrected errors arriving unusually fast.",
           Cause.MEMORY_ECC, "IGNORE", "CONTACT_SUPPORT", Rung.NOTIFY,
           notes="Trend signal for RMA; run field diagnostics."),
    _entry(94, "CONTAINED_ERROR", "Contained memory error",
           "Error confined to one app; that app must restart, others keep running.",
           Cause.MEMORY_ECC, "RESTART_APP", "IGNORE", Rung.RESTART_APP,
           notes="Reset the GPU when convenient."),
    _entry(95, "UNCONTAINED_ERROR", "Uncontained memory error",
           "Error affected several apps; the GPU must be reset before apps restart.",
           Cause.MEMORY_ECC, "RESET_GPU", "IGNORE", Rung.RESET_GPU,
           notes="MIG off: reboot the node now."),
    _entry(109, "CTXSW_TIMEOUT_ERROR", "Context switch timeout",
           "Context switch did not complete in time.",
           Cause.UNKNOWN, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU,
           notes="The k8s device plugin treats 109 as an app error; the catalog says reset."),
    _entry(110, "SEC_FAULT_ERROR", "Security fault", "Should be rare unless hardware failed.",
           Cause.HARDWARE, "RESET_GPU", "INVESTIGATE_SW", Rung.RESET_GPU),
    _entry(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout",
           "The GPU System Processor did not answer a driver RPC in time.",
           Cause.FIRMWARE, "RESET_GPU", "INVESTIGATE_SW", Rung.RESET_GPU,
           notes="nvidia-smi itself may hang."),
    _entry(120, "GSP_ERROR", "GSP error", "Error in code running on the GSP.",
           Cause.FIRMWARE, "RESET_GPU", "INVESTIGATE_SW", Rung.RESET_GPU),
    _entry(121, "C2C_ERROR", "C2C link corrected errors",
           "Corrected errors on the C2C NVLink between GPU and Grace CPU; no impact.",
           Cause.NVLINK, "IGNORE", "CONTACT_SUPPORT", Rung.IGNORE,
           notes="GB200 only. Reset at a service window to retrain the link."),
    _entry(122, "SPI_PMU_RPC_READ_FAIL", "SPI PMU RPC read failure", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(123, "SPI_PMU_RPC_WRITE_FAIL", "SPI PMU RPC write failure", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY,
           notes="Debug guidelines: report and reset the GPU."),
    _entry(124, "SPI_PMU_RPC_ERASE_FAIL", "SPI PMU RPC erase failure", _LEGACY,
           Cause.HARDWARE, "CONTACT_SUPPORT", "N/A", Rung.NOTIFY),
    _entry(136, "ALI_TRAINING_FAIL", "NVLink link training failed",
           "NVLink link training failed.",
           Cause.NVLINK, "RESET_GPU", "INVESTIGATE_LINK_SI", Rung.RESET_GPU),
    _entry(137, "NVLINK_PRIV_ERR", "NVLink illegal peer access",
           "Remote MMU fault from an illegal NVLink peer-to-peer access.",
           Cause.APPLICATION, "IGNORE", "XID_137_FLOW", Rung.IGNORE),
    _entry(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered",
           "Uncorrectable memory errors prevented page offlining or remapping.",
           Cause.MEMORY_ECC, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
    _entry(143, "GPU_INIT_ERROR", "GPU initialization error", "GPU failed to initialize.",
           Cause.HARDWARE, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
    _entry(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed",
           "Informational; states what recovery the other Xids need.",
           Cause.INFORMATIONAL, "XID_154", "N/A", Rung.IGNORE,
           notes="Read its target action: see rung_for_recovery_action()."),
    _entry(155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined link down",
           "Link-down flagged as intentional (includes entering SLEEP).",
           Cause.NVLINK, "RESET_GPU", "INVESTIGATE_SW_USER", Rung.RESET_GPU),
    _entry(156, "RESOURCE_RETIREMENT_EVENT", "Resource retired", "A resource was retired.",
           Cause.HARDWARE, "RESET_GPU", "IGNORE", Rung.RESET_GPU),
    _entry(157, "RESOURCE_RETIREMENT_FAILURE", "Resource retirement failure",
           "No spare resources left to retire; workloads may run but the Xid can recur.",
           Cause.HARDWARE, "IGNORE", "CONTACT_SUPPORT", Rung.NOTIFY),
    _entry(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", "Fatal GPU timeout.",
           Cause.FIRMWARE, "RESET_GPU", "CONTACT_SUPPORT", Rung.RESET_GPU),
]
# fmt: on

_NVLINK5_UNITS = {
    144: "NVLINK_SAW",
    145: "NVLINK_RLW",
    146: "NVLINK_TLW",
    147: "NVLINK_TREX",
    148: "NVLINK_NVLPW_CTRL",
    149: "NVLINK_NETIR",
    150: "NVLINK_MSE",
}


def _nvlink5_entries():
    return [
        _entry(
            code,
            f"{unit}_ERROR",
            f"NVLink5 {unit.removeprefix('NVLINK_')} error",
            "NVLink5 unit error; the line names sub-unit, severity, containment and link.",
            Cause.NVLINK,
            "WORKFLOW_NVLINK5_ERR",
            "WORKFLOW_NVLINK5_ERR",
            Rung.RESET_GPU,
            notes="B100/GB200 only; the real action depends on the sub-code.",
        )
        for code, unit in _NVLINK5_UNITS.items()
    ]


# §4 only lists these by bucket. Names are the legacy Xid listing's descriptions.
_RESTART_APP_ONLY = {
    11: "Invalid or corrupted push buffer stream",
    25: "Invalid or illegal push buffer stream",
    39: "Unused",
    40: "Unused",
    41: "Unused",
    60: "Video processor exception",
    70: "CE3: unknown error",
    71: "CE4: unknown error",
    72: "CE5: unknown error",
    75: "CE6: unknown error",
    76: "CE7: unknown error",
    77: "CE8: unknown error",
    80: "Corrupted data sent to GPU",
    82: "NVJPG0 error",
    83: "NVDEC1 error",
    84: "NVDEC2 error",
    85: "CE9: unknown error",
    86: "OFA exception",
    88: "NVDEC3 error",
    89: "NVDEC4 error",
    96: "NVDEC5 error",
    97: "NVDEC6 error",
    98: "NVDEC7 error",
    99: "NVJPG1 error",
    100: "NVJPG2 error",
    101: "NVJPG3 error",
    102: "NVJPG4 error",
    103: "NVJPG5 error",
    104: "NVJPG6 error",
    105: "NVJPG7 error",
    **{code: f"Xid {code}" for code in (*range(126, 136), 139)},
}

_IGNORE_ONLY = {
    14: "Unused",
    37: "Driver firmware error",
    44: "Graphics engine fault during context switch",
    66: "Illegal access by driver",
    67: "Illegal access by driver",
    93: "Non-fatal violation of provisioned InfoROM wear limit",
    106: "SMBPBI test message",
    107: "SMBPBI test message silent",
    108: "Reserved",
    141: "Xid 141",
}


def _bucket_only_entries():
    entries = [
        _entry(
            code,
            "",
            name,
            f"{name}. Catalog immediate action: restart the application.",
            Cause.UNKNOWN,
            "RESTART_APP",
            None,
            Rung.RESTART_APP,
        )
        for code, name in _RESTART_APP_ONLY.items()
    ]
    entries += [
        _entry(
            code,
            "",
            name,
            f"{name}. Catalog immediate action: ignore.",
            Cause.UNKNOWN,
            "IGNORE",
            None,
            Rung.IGNORE,
        )
        for code, name in _IGNORE_ONLY.items()
    ]
    entries += [
        _entry(
            54,
            "",
            "Auxiliary power is not connected to the GPU board",
            "Hands-on fix needed: check power cabling.",
            Cause.HARDWARE,
            "CHECK_MECHANICALS",
            None,
            Rung.REPLACE,
            notes="REPLACE here means take out of service for hands-on work.",
        ),
        _entry(
            78,
            "",
            "vGPU start error",
            "Catalog: update software or firmware.",
            Cause.DRIVER,
            "UPDATE_SWFW",
            None,
            Rung.NOTIFY,
        ),
        _entry(
            151,
            "",
            "Xid 151",
            "Catalog immediate action: restart the VM.",
            Cause.UNKNOWN,
            "RESTART_VM",
            None,
            Rung.REBOOT,
        ),
    ]
    return entries


CATALOGUE: dict[int, XidInfo] = {
    info.code: info for info in (*_TABLE, *_nvlink5_entries(), *_bucket_only_entries())
}


def lookup(code: int) -> XidInfo:
    """Return the catalogue entry, or an "unknown XID" entry: an Xid is never dropped."""
    info = CATALOGUE.get(code)
    if info is not None:
        return info
    return XidInfo(
        code=code,
        mnemonic="",
        name=f"unknown XID {code}",
        meaning=f"Xid {code} is not in Medbay's catalogue; look it up in NVIDIA's Xid catalog.",
        cause=Cause.UNKNOWN,
        immediate=None,
        investigatory=None,
        severity=Severity.WARNING,
        rung=Rung.NOTIFY,
        known=False,
    )


def strongest(rungs: Iterable[Rung]) -> Rung:
    """The most drastic of several rungs (IGNORE when there are none)."""
    return max(rungs, key=RUNG_ORDER.index, default=Rung.IGNORE)


def rung_for_recovery_action(action: int | None) -> Rung:
    """Rung for the target of an Xid 154 line or NVML's recovery action (unknown: notify)."""
    if action is None:
        return Rung.IGNORE
    return RECOVERY_ACTION_RUNGS.get(action, Rung.NOTIFY)


def escalate(
    code: int,
    *,
    repeats: int = 1,
    with_codes: Iterable[int] = frozenset(),
    mig_enabled: bool = False,
    persistent: bool = False,
) -> Rung:
    """The rung for an Xid given its context (§4 escalation rules).

    `repeats` counts bursts of this Xid on the same GPU, `with_codes` are the other Xids in
    the same burst, `persistent` means it came back after the default rung was applied.
    """
    others = set(with_codes) - {code}
    recurring = repeats > 1 or persistent
    rule = _ESCALATION_RULES.get(code)
    if rule is None:
        return lookup(code).rung
    return rule(
        others=others,
        recurring=recurring,
        mig_enabled=mig_enabled,
        persistent=persistent,
        repeats=repeats,
    )


def _escalate_48(*, others, **_):
    # 48 followed by a remap event (63/64) is fixed by a reset; alone it needs field diag.
    return Rung.RESET_GPU if others & {63, 64} else Rung.REPLACE


def _escalate_45(*, others, **_):
    # A lone 45 can mean Fabric Manager died; next to another Xid it is only sympathetic.
    return Rung.IGNORE if others else Rung.NOTIFY


def _escalate_95(*, recurring, mig_enabled, **_):
    if recurring:
        return Rung.REPLACE
    return Rung.RESET_GPU if mig_enabled else Rung.REBOOT


def _reset_then_replace(*, recurring, **_):
    return Rung.REPLACE if recurring else Rung.RESET_GPU


def _escalate_gsp(*, persistent, repeats, **_):
    # Reset first, power-cycle when it repeats, field diag when it survives the power cycle.
    if persistent:
        return Rung.REPLACE
    return Rung.REBOOT if repeats > 1 else Rung.RESET_GPU


def _escalate_79(*, recurring, **_):
    return Rung.REPLACE if recurring else Rung.REBOOT


def _escalate_110(*, persistent, **_):
    return Rung.REPLACE if persistent else Rung.RESET_GPU


_ESCALATION_RULES = {
    45: _escalate_45,
    48: _escalate_48,
    64: _reset_then_replace,
    74: _reset_then_replace,
    79: _escalate_79,
    95: _escalate_95,
    110: _escalate_110,
    119: _escalate_gsp,
    120: _escalate_gsp,
    140: _reset_then_replace,
}


# What each context rule says, for the catalogue's page: the rule that applied is named.
CONTEXT_RULES = {
    45: (
        "Alone (solo), XID 45 can mean Fabric Manager died: notify. Right after another"
        " XID on the same GPU it is only sympathetic: folded into that XID's incident and"
        " ignored, never counted as a fault of its own."
    ),
    48: "Followed by a row-remap event (63, 64): reset the GPU; alone: replace.",
    64: "Reset the GPU first; when it comes back, replace.",
    74: "Reset the GPU first; when it comes back, replace.",
    79: "The first time: restart the node; again on the same GPU within a day: replace.",
    95: "Reset the GPU where MIG is on, else reboot; again: replace.",
    110: "Reset the GPU; when it survives the reset: replace.",
    119: "Reset the GPU; again: power-cycle; surviving that: replace.",
    120: "Reset the GPU; again: power-cycle; surviving that: replace.",
    140: "Reset the GPU first; when it comes back, replace.",
}
