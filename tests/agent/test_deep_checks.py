"""The deep checks a node passes before it takes jobs again: NVLink, memory stress and
an NCCL all-reduce, on recorded tool output; a missing tool skips, never passes."""

from agent.checks import CheckStatus, CommandOutput
from agent.checks.deep import nvlink_links
from tests.agent.test_checks import context, run_one

NVLINK_UP = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
"""
NVLINK_ONE_DOWN = NVLINK_UP.replace("\t Link 1: 26.562 GB/s\n", "\t Link 1: <inactive>\n", 1)
NCCL_OK = """#  Rank  0 Group  0 Pid  1234 on gpu-01 device  0 [0x18] NVIDIA H100
#       size         count      type   redop    root     time   algbw   busbw #wrong
     8388608       2097152     float     sum      -1    85.21   98.45  172.29      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 172.29
"""


def test_nvlink_links_are_read_per_gpu():
    assert nvlink_links(NVLINK_ONE_DOWN) == {
        0: {0: "26.562 GB/s", 1: "<inactive>"},
        1: {0: "26.562 GB/s", 1: "26.562 GB/s"},
    }


def test_nvlink_passes_with_every_link_up_and_fails_naming_a_link_down(tmp_path):
    up = run_one("nvlink", context(tmp_path, {"nvidia-smi": CommandOutput(0, NVLINK_UP)}))
    assert (up.status, up.message) == (CheckStatus.PASS, "4 NVLink link(s) up on 2 GPU(s)")
    down = context(tmp_path, {"nvidia-smi": CommandOutput(0, NVLINK_ONE_DOWN)})
    result = run_one("nvlink", down)
    assert (result.status, result.message) == (CheckStatus.FAIL, "NVLink down: GPU 0 link 1")


def test_a_node_without_nvlink_or_without_nvidia_smi_skips_with_the_reason(tmp_path):
    bare = run_one("nvlink", context(tmp_path, {"nvidia-smi": CommandOutput(0, "")}))
    assert bare.status == CheckStatus.SKIP and "no NVLink links" in bare.message
    missing = run_one("nvlink", context(tmp_path, tools=()))
    assert (missing.status, missing.message) == (CheckStatus.SKIP, "nvidia-smi not found")


def test_nccl_all_reduce_passes_reporting_the_bus_bandwidth(tmp_path):
    ctx = context(
        tmp_path,
        {"all_reduce_perf": CommandOutput(0, NCCL_OK)},
        config={"nccl": {"gpus": 8}},
        tools=("all_reduce_perf",),
    )
    result = run_one("nccl_allreduce", ctx)
    assert result.status == CheckStatus.PASS
    assert result.message == "NCCL all-reduce on 8 GPU(s): 172.29 GB/s bus bandwidth"
    assert ctx.run.calls[0][-2:] == ["-g", "8"]


def test_nccl_all_reduce_fails_on_wrong_values_or_a_bandwidth_below_the_floor(tmp_path):
    wrong = NCCL_OK.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED")
    answers = {"all_reduce_perf": CommandOutput(0, wrong)}
    config = {"nccl": {"gpus": 8}}
    ctx = context(tmp_path, answers, config=config, tools=("all_reduce_perf",))
    assert run_one("nccl_allreduce", ctx).message == "NCCL all-reduce gave 3 out-of-bounds value(s)"
    slow = {"nccl": {"gpus": 8, "min_busbw_gbps": 300}}
    answers = {"all_reduce_perf": CommandOutput(0, NCCL_OK)}
    result = run_one(
        "nccl_allreduce", context(tmp_path, answers, config=slow, tools=("all_reduce_perf",))
    )
    assert result.status == CheckStatus.FAIL and "below 300" in result.message


def test_nccl_skips_where_nccl_tests_are_not_installed(tmp_path):
    ctx = context(tmp_path, config={"nccl": {"gpus": 8}}, tools=())
    result = run_one("nccl_allreduce", ctx)
    assert (result.status, result.message) == (CheckStatus.SKIP, "all_reduce_perf not found")


def test_memory_stress_writes_and_verifies(tmp_path):
    result = run_one("memory_stress", context(tmp_path, config={"memory_stress": {"mib": 8}}))
    assert (result.status, result.message) == (CheckStatus.PASS, "8 MiB written and verified twice")


def test_nvlink_with_every_link_inactive_warns_unless_the_site_expects_links(tmp_path):
    all_down = NVLINK_UP.replace("26.562 GB/s", "<inactive>")
    answers = {"nvidia-smi": CommandOutput(0, all_down)}
    alone = run_one("nvlink", context(tmp_path, answers))
    assert alone.status == CheckStatus.WARN and "expected_links" in alone.message
    expected = context(tmp_path, answers, config={"nvlink": {"expected_links": 2}})
    result = run_one("nvlink", expected)
    assert result.status == CheckStatus.FAIL
    assert result.message == "NVLink links up below 2 per GPU: GPU 0: 0 of 2; GPU 1: 0 of 2"
