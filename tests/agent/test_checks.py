import subprocess
from pathlib import Path

import pytest

from agent.checks import ALL_CHECKS, CheckContext, CheckStatus, CommandOutput, run_checks
from agent.checks.base import Check, Mode
from agent.checks.slurm import gres_gpu_count

NODE_LINE = (
    "NodeName=gpu-07 Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 Gres=gpu:h100:2(S:0-1) "
    "RealMemory=8000 State=IDLE Partitions=gpu"
)


class FakeCommands:
    """Answers commands from a table keyed by program name; records every call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout_s, env=None):
        self.calls.append(list(argv))
        answer = self.answers[Path(argv[0]).name]
        if isinstance(answer, Exception):
            raise answer
        return answer


def context(tmp_path, answers=None, config=None, env=None, tools=("nvidia-smi", "scontrol")):
    return CheckContext(
        sysfs_root=tmp_path / "sys",
        proc_root=tmp_path / "proc",
        run=FakeCommands(answers or {}),
        config=config or {},
        env=env or {},
        which=lambda name: f"/usr/bin/{name}" if name in tools else None,
    )


def nvsmi_answer(fixtures, name):
    return CommandOutput(0, (fixtures / name).read_text())


def run_one(name, ctx):
    return ALL_CHECKS[name].run(ctx)


def test_nvidia_smi_check_passes_when_it_answers(tmp_path, fixtures):
    ctx = context(tmp_path, {"nvidia-smi": nvsmi_answer(fixtures, "nvsmi_h100_healthy.xml")})
    result = run_one("nvidia_smi_responds", ctx)
    assert result.status == CheckStatus.PASS
    assert "2 GPU(s)" in result.message


def test_nvidia_smi_check_skips_when_the_binary_is_missing(tmp_path):
    result = run_one("nvidia_smi_responds", context(tmp_path, tools=()))
    assert (result.status, result.message) == (CheckStatus.SKIP, "nvidia-smi not found")


def test_nvidia_smi_check_fails_on_a_timeout_and_runs_it_only_once(tmp_path):
    ctx = context(tmp_path, {"nvidia-smi": subprocess.TimeoutExpired("nvidia-smi", 20)})
    results = run_checks([ALL_CHECKS[n] for n in ("nvidia_smi_responds", "ecc_remap")], ctx)
    assert [r.status for r in results] == [CheckStatus.FAIL, CheckStatus.FAIL]
    assert "did not answer within 20s" in results[0].message
    assert len(ctx.run.calls) == 1


def test_nvidia_smi_check_explains_a_bad_exit_code(tmp_path):
    ctx = context(tmp_path, {"nvidia-smi": CommandOutput(9, "", "NVIDIA-SMI has failed")})
    result = run_one("nvidia_smi_responds", ctx)
    assert result.status == CheckStatus.FAIL
    assert result.message == "nvidia-smi exited 9: NVIDIA driver is not loaded"


def test_gpu_count_uses_config_before_slurm(tmp_path, fixtures):
    ctx = context(
        tmp_path,
        {"nvidia-smi": nvsmi_answer(fixtures, "nvsmi_h100_healthy.xml")},
        config={"expected_gpus": 8},
    )
    result = run_one("gpu_count", ctx)
    assert (result.status, result.message) == (
        CheckStatus.FAIL,
        "found 2 GPUs, expected 8 (config)",
    )


def test_gpu_count_reads_the_expected_count_from_slurm_gres(tmp_path, fixtures):
    ctx = context(
        tmp_path,
        {
            "nvidia-smi": nvsmi_answer(fixtures, "nvsmi_h100_healthy.xml"),
            "scontrol": CommandOutput(0, NODE_LINE),
        },
        env={"SLURMD_NODENAME": "gpu-07"},
    )
    assert run_one("gpu_count", ctx).status == CheckStatus.PASS
    assert ["/usr/bin/scontrol", "-o", "show", "node", "gpu-07"] in ctx.run.calls


def test_gpu_count_skips_when_nothing_says_how_many_gpus_to_expect(tmp_path):
    assert run_one("gpu_count", context(tmp_path)).status == CheckStatus.SKIP


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:h100:8(S:0-1)", 8), ("gpu:8", 8), ("gpu:a100:2,gpu:t4:1", 3), ("(null)", None),
     ("", None)],
)  # fmt: skip
def test_it_counts_gpus_in_a_gres_string(gres, count):
    assert gres_gpu_count(gres) == count


def test_ecc_remap_fails_on_volatile_dbe_and_recovery_action(tmp_path, fixtures):
    ctx = context(
        tmp_path, {"nvidia-smi": nvsmi_answer(fixtures, "nvsmi_h100_dbe_remap_pending.xml")}
    )
    result = run_one("ecc_remap", ctx)
    assert result.status == CheckStatus.FAIL
    assert result.message.startswith("GPU 1 (0000:55:00): 2 volatile uncorrectable ECC error(s)")
    assert "recovery action Drain and Reset" in result.message
    assert result.data["warnings"] == ["GPU 1 (0000:55:00): row remap pending (reset to apply)"]


def test_ecc_remap_passes_on_a_healthy_gpu(tmp_path, fixtures):
    ctx = context(tmp_path, {"nvidia-smi": nvsmi_answer(fixtures, "nvsmi_h100_healthy.xml")})
    assert run_one("ecc_remap", ctx).status == CheckStatus.PASS


def test_ecc_remap_warns_on_a_pending_remap_alone(tmp_path, fixtures):
    xml = (fixtures / "nvsmi_h100_healthy.xml").read_text()
    xml = xml.replace("<remapped_row_pending>No", "<remapped_row_pending>Yes", 1)
    ctx = context(tmp_path, {"nvidia-smi": CommandOutput(0, xml)})
    result = run_one("ecc_remap", ctx)
    assert (result.status, result.message) == (
        CheckStatus.WARN, "GPU 0 (0000:18:00): row remap pending (reset to apply)"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("<remapped_row_failure>No", "<remapped_row_failure>Yes", "row remapping failed"),
        ("<sram_threshold_exceeded>No", "<sram_threshold_exceeded>Yes", "SRAM threshold"),
    ],
)
def test_ecc_remap_fails_on_remap_failure_and_sram_threshold(tmp_path, fixtures, old, new, words):
    xml = (fixtures / "nvsmi_h100_healthy.xml").read_text().replace(old, new, 1)
    result = run_one("ecc_remap", context(tmp_path, {"nvidia-smi": CommandOutput(0, xml)}))
    assert result.status == CheckStatus.FAIL
    assert words in result.message


def test_throttle_warns_on_hardware_slowdown(tmp_path, fixtures):
    ctx = context(tmp_path, {"nvidia-smi": nvsmi_answer(fixtures, "nvsmi_a100_old_driver.xml")})
    result = run_one("throttle", ctx)
    assert result.status == CheckStatus.WARN
    assert result.message == "hardware clock slowdown: GPU 1: hw_slowdown, hw_thermal_slowdown"


def test_dcgm_checks_skip_without_dcgmi(tmp_path):
    ctx = context(tmp_path)
    assert run_one("dcgm_diag", ctx).status == CheckStatus.SKIP
    assert run_one("dcgm_health", ctx).status == CheckStatus.SKIP


def test_dcgm_health_fails_with_dcgm_message(tmp_path, fixtures):
    report = (fixtures / "dcgmi_health_failure_dbe.txt").read_text()
    ctx = context(tmp_path, {"dcgmi": CommandOutput(0, report)}, tools=("dcgmi",))
    result = run_one("dcgm_health", ctx)
    assert (result.status, result.message) == (
        CheckStatus.FAIL, "Detected 1 volatile double-bit ECC error(s) in GPU 1."
    )  # fmt: skip


def test_dcgm_diag_runs_the_configured_level(tmp_path):
    table = "| Denylist                  | Pass                                   |\n"
    ctx = context(
        tmp_path, {"dcgmi": CommandOutput(0, table)}, config={"dcgm": {"diag_level": 2}},
        tools=("dcgmi",),
    )  # fmt: skip
    assert run_one("dcgm_diag", ctx).status == CheckStatus.PASS
    assert ctx.run.calls == [["/usr/bin/dcgmi", "diag", "-r", "2"]]


def make_ib_port(
    sys_root, device, port, state="4: ACTIVE", phys="5: LinkUp", rate="400 Gb/sec (4X NDR)"
):
    folder = sys_root / "class" / "infiniband" / device / "ports" / str(port)
    folder.mkdir(parents=True)
    (folder / "state").write_text(state + "\n")
    (folder / "phys_state").write_text(phys + "\n")
    (folder / "rate").write_text(rate + "\n")


def test_infiniband_skips_when_there_is_no_infiniband(tmp_path):
    assert run_one("infiniband", context(tmp_path)).status == CheckStatus.SKIP


def test_infiniband_passes_when_every_port_is_active(tmp_path):
    make_ib_port(tmp_path / "sys", "mlx5_0", 1)
    make_ib_port(tmp_path / "sys", "mlx5_1", 1)
    result = run_one("infiniband", context(tmp_path))
    assert (result.status, result.data["ports"]) == (CheckStatus.PASS, ["mlx5_0/1", "mlx5_1/1"])


def test_infiniband_fails_on_a_down_port_or_a_slow_link(tmp_path):
    make_ib_port(tmp_path / "sys", "mlx5_0", 1, state="1: DOWN", phys="3: Disabled")
    make_ib_port(tmp_path / "sys", "mlx5_1", 1, rate="100 Gb/sec (4X EDR)")
    ctx = context(tmp_path, config={"infiniband": {"min_rate_gbps": 400}})
    result = run_one("infiniband", ctx)
    assert result.status == CheckStatus.FAIL
    assert result.message == (
        "InfiniBand: mlx5_0/1 state 1: DOWN; mlx5_1/1 rate 100 Gb/sec (4X EDR) below 400 Gb/sec"
    )


def test_disk_free_fails_below_the_threshold(tmp_path):
    ctx = context(tmp_path, config={"disk": {"paths": [str(tmp_path)], "min_free_percent": 101}})
    result = run_one("disk_free", ctx)
    assert result.status == CheckStatus.FAIL
    assert result.message.startswith(f"low disk: {tmp_path} has")


def test_disk_free_fails_on_a_missing_path(tmp_path):
    ctx = context(tmp_path, config={"disk": {"paths": [str(tmp_path / "nope")]}})
    assert run_one("disk_free", ctx).status == CheckStatus.FAIL


def write_meminfo(tmp_path, kib):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(f"MemTotal:       {kib} kB\nMemFree: 1 kB\n")


def test_memory_fails_when_ram_is_missing(tmp_path):
    write_meminfo(tmp_path, 4 * 1024 * 1024)
    ctx = context(tmp_path, config={"memory": {"expected_gb": 8}})
    result = run_one("memory", ctx)
    assert (result.status, result.message) == (
        CheckStatus.FAIL, "only 4096 MiB RAM, expected 8192 MiB (config)"
    )  # fmt: skip


def test_memory_compares_with_slurm_real_memory(tmp_path):
    write_meminfo(tmp_path, 8 * 1024 * 1024)
    ctx = context(tmp_path, {"scontrol": CommandOutput(0, NODE_LINE)}, env={"SLURMD_NODENAME": "x"})
    assert run_one("memory", ctx).status == CheckStatus.PASS


def test_memory_skips_without_meminfo(tmp_path):
    assert run_one("memory", context(tmp_path)).status == CheckStatus.SKIP


def test_cpu_stress_runs_a_bounded_load_on_every_worker(tmp_path):
    ctx = context(tmp_path, config={"cpu_stress": {"seconds": 0.1, "workers": 2}})
    result = run_one("cpu_stress", ctx)
    assert result.status == CheckStatus.PASS
    assert result.duration_s < 5


def test_force_drain_fails_while_the_file_exists(tmp_path):
    fail_file = tmp_path / "force-drain"
    ctx = context(tmp_path, config={"fail_file": str(fail_file)})
    assert run_one("force_drain", ctx).status == CheckStatus.PASS
    fail_file.write_text("bad fan in slot 3\n")
    result = run_one("force_drain", ctx)
    assert (result.status, result.message) == (
        CheckStatus.FAIL, f"force-drain file {fail_file} present: bad fan in slot 3"
    )  # fmt: skip


def test_run_checks_turns_a_crashing_check_into_a_failure(tmp_path):
    def explode(ctx, timeout_s):
        raise RuntimeError("boom")

    crashing = Check("crashing", "nothing", Mode.PASSIVE, 1.0, explode)
    (result,) = run_checks([crashing], context(tmp_path))
    assert (result.name, result.status, result.message) == (
        "crashing", CheckStatus.FAIL, "RuntimeError: boom"
    )  # fmt: skip
