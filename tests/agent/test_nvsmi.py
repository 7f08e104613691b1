import pytest

from agent.parsers.nvsmi import parse_exit_code, parse_xml


def load(fixtures, name):
    return parse_xml((fixtures / name).read_text())


def test_it_reads_a_healthy_h100_on_a_new_driver(fixtures):
    report = load(fixtures, "nvsmi_h100_healthy.xml")
    assert report.driver_version == "570.124.06"
    first = report.gpus[0]
    assert (first.index, first.pci, first.product_name) == (
        0,
        "0000:18:00",
        "NVIDIA H100 80GB HBM3",
    )
    assert first.uuid == "GPU-6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a50"
    assert (first.volatile_sbe, first.volatile_dbe, first.aggregate_dbe) == (0, 0, 0)
    assert first.sram_threshold_exceeded is False
    assert (first.remap_pending, first.remap_failure) == (False, False)
    assert (first.retired_pages_sbe, first.retired_pages_pending) == (None, None)
    assert first.clocks_event_reasons == ("gpu_idle",)
    assert (first.temperature_c, first.power_draw_w) == (34.0, 69.88)
    assert (first.reset_required, first.drain_and_reset_recommended) == (False, False)
    assert first.recovery_action == "None"
    assert report.gpus[1].pci == "0000:2a:00"


def test_it_reads_volatile_dbe_and_a_pending_remap(fixtures):
    bad = load(fixtures, "nvsmi_h100_dbe_remap_pending.xml").gpus[1]
    assert (bad.volatile_dbe, bad.aggregate_dbe, bad.remapped_rows_unc) == (2, 2, 1)
    assert (bad.remap_pending, bad.drain_and_reset_recommended) == (True, True)
    assert bad.recovery_action == "Drain and Reset"


def test_it_reads_the_old_driver_layout_with_throttle_reasons(fixtures):
    report = load(fixtures, "nvsmi_a100_old_driver.xml")
    first, second = report.gpus
    assert (first.volatile_sbe, first.volatile_dbe, first.aggregate_sbe) == (3, 0, 3)
    assert first.sram_threshold_exceeded is None
    assert first.reset_required is None and first.recovery_action is None
    assert second.clocks_event_reasons == ("hw_slowdown", "hw_thermal_slowdown")
    assert (second.temperature_c, second.power_draw_w) == (88.0, 212.4)


MINIMAL = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>535.54.03</driver_version>
<gpu id="00000000:3B:00.0">
  <product_name>Tesla T4</product_name>
  <uuid>GPU-aaaa</uuid>
  <gpu_reset_status><reset_required>Requested functionality has been deprecated</reset_required>
  </gpu_reset_status>
  <ecc_errors><volatile><sram_correctable>N/A</sram_correctable>
  <dram_uncorrectable>[N/A]</dram_uncorrectable></volatile></ecc_errors>
  <retired_pages>
    <multiple_single_bit_retirement><retired_count>2</retired_count></multiple_single_bit_retirement>
    <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
    <pending_blacklist>No</pending_blacklist><pending_retirement>Yes</pending_retirement>
  </retired_pages>
  <remapped_rows>N/A</remapped_rows>
  <temperature><gpu_temp>N/A</gpu_temp></temperature>
  <power_readings><power_draw>Unknown Error</power_draw></power_readings>
</gpu></nvidia_smi_log>"""


def test_missing_and_na_values_become_none():
    gpu = parse_xml(MINIMAL).gpus[0]
    assert gpu.pci == "0000:3b:00"
    assert (gpu.volatile_sbe, gpu.volatile_dbe) == (None, None)
    assert (gpu.remapped_rows_corr, gpu.remap_pending, gpu.remap_failure) == (None, None, None)
    assert (gpu.temperature_c, gpu.power_draw_w, gpu.reset_required) == (None, None, None)
    assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe, gpu.retired_pages_pending) == (2, 1, True)
    assert gpu.clocks_event_reasons == ()


def test_unreadable_output_raises_value_error():
    with pytest.raises(ValueError, match="not valid XML"):
        parse_xml("Failed to initialize NVML: Driver/library version mismatch")


@pytest.mark.parametrize(
    ("code", "words"),
    [(0, "ok"), (9, "driver is not loaded"), (12, "NVML shared library"), (14, "InfoROM"),
     (15, "fallen off the bus"), (77, "unknown nvidia-smi exit code 77")],
)  # fmt: skip
def test_it_explains_nvidia_smi_exit_codes(code, words):
    assert words in parse_exit_code(code)
