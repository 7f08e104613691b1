import sys
import types

import pytest

from agent.parsers import nvml
from agent.parsers.nvml import NvmlUnavailable, read_gpus


def test_it_raises_nvml_unavailable_when_pynvml_is_not_installed(monkeypatch):
    # A None entry in sys.modules makes `import pynvml` raise ImportError.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable, match="not installed"):
        read_gpus()


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


def fake_pynvml(**overrides):
    module = types.SimpleNamespace(
        NVMLError=FakeNvmlError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 0,
    )
    for name, value in overrides.items():
        setattr(module, name, value)
    return module


def test_it_raises_nvml_unavailable_when_init_fails(monkeypatch):
    def broken_init():
        raise FakeNvmlError("Driver Not Loaded")

    monkeypatch.setattr(nvml, "_import_pynvml", lambda: fake_pynvml(nvmlInit=broken_init))
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        read_gpus()


def test_it_raises_nvml_unavailable_when_there_is_no_gpu(monkeypatch):
    monkeypatch.setattr(nvml, "_import_pynvml", lambda: fake_pynvml())
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        read_gpus()


def test_it_reads_a_gpu_and_treats_unsupported_queries_as_unknown(monkeypatch):
    def unsupported(*_args):
        raise FakeNvmlError("Not Supported")

    module = fake_pynvml(
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: f"handle-{index}",
        nvmlDeviceGetUUID=lambda handle: "GPU-1234",
        nvmlDeviceGetPciInfo=lambda handle: types.SimpleNamespace(busId=b"00000000:3B:00.0"),
        nvmlDeviceGetName=lambda handle: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetTotalEccErrors=lambda handle, kind, counter: 7 if kind else 0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_AGGREGATE_ECC=1,
        nvmlDeviceGetRetiredPages=unsupported,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlDeviceGetRetiredPagesPendingStatus=unsupported,
        nvmlDeviceGetRemappedRows=lambda handle: (0, 1, 1, 0),
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: 0x8 | 0x40,
        nvmlDeviceGetTemperature=lambda handle, sensor: 45,
        NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetPowerUsage=lambda handle: 250_500,
        nvmlDeviceGetFieldValues=unsupported,
    )
    monkeypatch.setattr(nvml, "_import_pynvml", lambda: module)
    (gpu,) = read_gpus()
    assert (gpu.uuid, gpu.pci, gpu.product_name) == (
        "GPU-1234",
        "0000:3b:00",
        "NVIDIA H100 80GB HBM3",
    )
    assert (gpu.volatile_sbe, gpu.volatile_dbe) == (0, 7)
    assert (gpu.retired_pages_sbe, gpu.retired_pages_pending) == (None, None)
    assert (gpu.remapped_rows_unc, gpu.remap_pending, gpu.remap_failure) == (1, True, False)
    assert gpu.clocks_event_reasons == ("hw_slowdown", "hw_thermal_slowdown")
    assert (gpu.temperature_c, gpu.power_draw_w, gpu.recovery_action) == (45.0, 250.5, None)
