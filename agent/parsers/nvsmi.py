"""`nvidia-smi -q -x` parsing (element names per §2.2 of reference/gpu-faults.md).

Every value that is missing, `N/A`, `[N/A]`, "Not Supported" or otherwise unreadable becomes
None: drivers differ in what they print, and a health check must never crash on that.
"""

import re
import xml.etree.ElementTree as ET  # noqa: S405 - parses nvidia-smi's local output only
from dataclasses import dataclass

from agent.parsers.pci import normalise_pci

# NVML return codes that nvidia-smi uses as its exit status (§2.2).
EXIT_CODES = {
    0: "ok",
    2: "invalid argument",
    3: "requested operation not available on target device",
    4: "insufficient permissions",
    6: "query not successful",
    8: "external power cables not attached",
    9: "NVIDIA driver is not loaded",
    10: "interrupt issue with a GPU",
    12: "NVML shared library could not be found or loaded",
    13: "function not implemented in the local NVML library",
    14: "InfoROM is corrupted",
    15: "GPU has fallen off the bus or has otherwise become inaccessible",
}

_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")

# Volatile/aggregate counters: which elements add up to single- and double-bit totals.
_NEW_LAYOUT_SBE = ("sram_correctable", "dram_correctable")
_NEW_LAYOUT_DBE = (
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "sram_uncorrectable",  # R535-R550 print one SRAM uncorrectable counter
    "dram_uncorrectable",
)


@dataclass(frozen=True)
class GpuStatus:
    index: int
    uuid: str | None
    pci: str | None
    product_name: str | None
    volatile_sbe: int | None = None
    volatile_dbe: int | None = None
    aggregate_sbe: int | None = None
    aggregate_dbe: int | None = None
    sram_threshold_exceeded: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_corr: int | None = None
    remapped_rows_unc: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    clocks_event_reasons: tuple[str, ...] = ()
    temperature_c: float | None = None
    power_draw_w: float | None = None
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    recovery_action: str | None = None


@dataclass(frozen=True)
class NvsmiReport:
    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuStatus]


def parse_exit_code(code: int) -> str:
    """What an nvidia-smi exit status means."""
    return EXIT_CODES.get(code, f"unknown nvidia-smi exit code {code}")


def parse_xml(text: str | bytes) -> NvsmiReport:
    """Parse the whole `nvidia-smi -q -x` document. Raises ValueError if it is not XML."""
    try:
        root = ET.fromstring(text)  # noqa: S314 - trusted local command output
    except ET.ParseError as error:
        raise ValueError(f"nvidia-smi output is not valid XML: {error}") from error
    gpus = [_gpu(index, element) for index, element in enumerate(root.findall("gpu"))]
    return NvsmiReport(
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        gpus=gpus,
    )


def _gpu(index: int, gpu: ET.Element) -> GpuStatus:
    pci_text = _text(gpu, "pci/pci_bus_id") or gpu.get("id")
    return GpuStatus(
        index=index,
        uuid=_text(gpu, "uuid"),
        pci=normalise_pci(pci_text) if pci_text else None,
        product_name=_text(gpu, "product_name"),
        **_ecc(gpu),
        **_retired_pages(gpu),
        **_remapped_rows(gpu),
        clocks_event_reasons=_active_clock_reasons(gpu),
        temperature_c=_number(_text(gpu, "temperature/gpu_temp")),
        power_draw_w=_power_draw(gpu),
        reset_required=_yes_no(_text(gpu, "gpu_reset_status/reset_required")),
        drain_and_reset_recommended=_yes_no(
            _text(gpu, "gpu_reset_status/drain_and_reset_recommended")
        ),
        recovery_action=_text(gpu, "gpu_recovery_action"),
    )


def _text(element: ET.Element, path: str) -> str | None:
    """Stripped text at `path`, or None when absent, empty or a "not available" marker."""
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    if not text or text.strip("[]").lower() in ("n/a", "not supported", "unknown error"):
        return None
    return text


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    return float(match[1]) if match else None


def _int(text: str | None) -> int | None:
    number = _number(text)
    return None if number is None else int(number)


def _yes_no(text: str | None) -> bool | None:
    # R570+ prints "Requested functionality has been deprecated" for the reset status.
    if text is None:
        return None
    return {"yes": True, "no": False}.get(text.lower())


def _sum(element: ET.Element | None, names: tuple[str, ...]) -> int | None:
    if element is None:
        return None
    values = [_int(_text(element, name)) for name in names]
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _ecc_counts(block: ET.Element | None) -> tuple[int | None, int | None]:
    """(single-bit, double-bit) totals of a volatile/aggregate block, either layout."""
    if block is None:
        return None, None
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        return _int(_text(block, "single_bit/total")), _int(_text(block, "double_bit/total"))
    return _sum(block, _NEW_LAYOUT_SBE), _sum(block, _NEW_LAYOUT_DBE)


def _ecc(gpu: ET.Element) -> dict:
    volatile_sbe, volatile_dbe = _ecc_counts(gpu.find("ecc_errors/volatile"))
    aggregate_sbe, aggregate_dbe = _ecc_counts(gpu.find("ecc_errors/aggregate"))
    threshold = _text(gpu, "ecc_errors/aggregate/sram_threshold_exceeded") or _text(
        gpu, "ecc_errors/sram_threshold_exceeded"
    )
    return {
        "volatile_sbe": volatile_sbe,
        "volatile_dbe": volatile_dbe,
        "aggregate_sbe": aggregate_sbe,
        "aggregate_dbe": aggregate_dbe,
        "sram_threshold_exceeded": _yes_no(threshold),
    }


def _retired_pages(gpu: ET.Element) -> dict:
    pending = [
        _yes_no(_text(gpu, "retired_pages/pending_blacklist")),
        _yes_no(_text(gpu, "retired_pages/pending_retirement")),
    ]
    known = [value for value in pending if value is not None]
    return {
        "retired_pages_sbe": _int(
            _text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")
        ),
        "retired_pages_dbe": _int(_text(gpu, "retired_pages/double_bit_retirement/retired_count")),
        "retired_pages_pending": any(known) if known else None,
    }


def _remapped_rows(gpu: ET.Element) -> dict:
    # On GPUs without row remapping the whole element is the text "N/A": every find is None.
    return {
        "remapped_rows_corr": _int(_text(gpu, "remapped_rows/remapped_row_corr")),
        "remapped_rows_unc": _int(_text(gpu, "remapped_rows/remapped_row_unc")),
        "remap_pending": _yes_no(_text(gpu, "remapped_rows/remapped_row_pending")),
        "remap_failure": _yes_no(_text(gpu, "remapped_rows/remapped_row_failure")),
    }


def _active_clock_reasons(gpu: ET.Element) -> tuple[str, ...]:
    """Names of active clock event reasons, e.g. ("sw_power_cap", "hw_slowdown").

    Older drivers call the block `clocks_throttle_reasons`; the reason names are the same.
    """
    for block_name, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        block = gpu.find(block_name)
        if block is not None:
            return tuple(
                child.tag.removeprefix(prefix)
                for child in block
                if (child.text or "").strip().lower() == "active"
            )
    return ()


def _power_draw(gpu: ET.Element) -> float | None:
    for path in (
        "gpu_power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
        "gpu_power_readings/average_power_draw",
        "power_readings/power_draw",
    ):
        value = _number(_text(gpu, path))
        if value is not None:
            return value
    return None
