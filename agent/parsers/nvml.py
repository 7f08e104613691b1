"""Optional NVML reader (package `nvidia-ml-py`, module `pynvml`) returning nvsmi's GpuStatus.

Nothing requires it: without the library, a driver or a GPU, `read_gpus()` raises
NvmlUnavailable and callers fall back to `nvidia-smi -q -x`.
"""

import importlib
from collections.abc import Callable

from agent.parsers.nvsmi import GpuStatus
from agent.parsers.pci import normalise_pci

# nvmlClocksEventReason* bits (§2.4), named like nvidia-smi's XML elements.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}

# nvmlDeviceGpuRecoveryAction_t, in the words nvidia-smi prints for "GPU Recovery Action".
RECOVERY_ACTION_WORDS = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
_RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, not DCGM's field 230


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: library missing, driver not loaded or no GPU."""


def read_gpus() -> list[GpuStatus]:
    nvml = _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML init failed: {error}") from error
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU")
        return [_read_gpu(nvml, index) for index in range(count)]
    except nvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML query failed: {error}") from error
    finally:
        _shutdown(nvml)


def _import_pynvml():
    try:
        return importlib.import_module("pynvml")
    except ImportError as error:
        raise NvmlUnavailable("pynvml is not installed (pip install nvidia-ml-py)") from error


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        return


def _read_gpu(nvml, index: int) -> GpuStatus:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def query(function: Callable, *args):
        # Each counter may be unsupported on this GPU or driver; that is "unknown", not fatal.
        try:
            return function(handle, *args)
        except nvml.NVMLError:
            return None

    pci_info = query(nvml.nvmlDeviceGetPciInfo)
    remapped = query(nvml.nvmlDeviceGetRemappedRows) or (None, None, None, None)
    power_mw = query(nvml.nvmlDeviceGetPowerUsage)
    return GpuStatus(
        index=index,
        uuid=_text(query(nvml.nvmlDeviceGetUUID)),
        pci=normalise_pci(_text(pci_info.busId)) if pci_info is not None else None,
        product_name=_text(query(nvml.nvmlDeviceGetName)),
        **_ecc_counts(nvml, query),
        **_retired_pages(nvml, query),
        remapped_rows_corr=remapped[0],
        remapped_rows_unc=remapped[1],
        remap_pending=None if remapped[2] is None else bool(remapped[2]),
        remap_failure=None if remapped[3] is None else bool(remapped[3]),
        clocks_event_reasons=_clock_reasons(nvml, query),
        temperature_c=_float(query(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)),
        power_draw_w=None if power_mw is None else power_mw / 1000,
        recovery_action=_recovery_action(
            query(nvml.nvmlDeviceGetFieldValues, [_RECOVERY_ACTION_FIELD])
        ),
    )


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _float(value) -> float | None:
    return None if value is None else float(value)


def _ecc_counts(nvml, query: Callable) -> dict:
    def total(error_type, counter_type):
        return query(nvml.nvmlDeviceGetTotalEccErrors, error_type, counter_type)

    corrected, uncorrected = (
        nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    )
    return {
        "volatile_sbe": total(corrected, nvml.NVML_VOLATILE_ECC),
        "volatile_dbe": total(uncorrected, nvml.NVML_VOLATILE_ECC),
        "aggregate_sbe": total(corrected, nvml.NVML_AGGREGATE_ECC),
        "aggregate_dbe": total(uncorrected, nvml.NVML_AGGREGATE_ECC),
    }


def _retired_pages(nvml, query: Callable) -> dict:
    single = query(
        nvml.nvmlDeviceGetRetiredPages,
        nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    double = query(
        nvml.nvmlDeviceGetRetiredPages, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = query(nvml.nvmlDeviceGetRetiredPagesPendingStatus)
    return {
        "retired_pages_sbe": None if single is None else len(single),
        "retired_pages_dbe": None if double is None else len(double),
        "retired_pages_pending": None if pending is None else bool(pending),
    }


def _clock_reasons(nvml, query: Callable) -> tuple[str, ...]:
    # Older pynvml releases only have the "throttle" name for the same bitmask.
    reader = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reader = reader or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = query(reader)
    if mask is None:
        return ()
    return tuple(name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit)


def _recovery_action(values) -> str | None:
    if not values or values[0].nvmlReturn != 0:
        return None
    return RECOVERY_ACTION_WORDS.get(values[0].value.uiVal)
