"""medbay-launch: scontrol parsing, the environment and the srun step it builds."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jobs import launcher
from jobs.launcher import (
    JobInfo,
    inner_command,
    launch,
    launch_env,
    master_port,
    parse_launch_args,
    parse_scontrol_job,
    read_job_info,
    run_inner,
)

SAMPLES = Path(__file__).parent / "samples"


def sample(name):
    return (SAMPLES / name).read_text()


def test_a_22_05_one_line_record_gives_the_current_nodes_and_batch_host():
    info = parse_scontrol_job(sample("scontrol_22.05_o_show_job_3_requeued.txt"))
    assert info == JobInfo(node_list="gpu-[01,03]", batch_host="gpu-01", restarts=1)


def test_req_and_exc_node_lists_are_not_mistaken_for_the_node_list():
    line = sample("scontrol_22.05_o_show_job_all.txt").splitlines()[3]
    assert "ReqNodeList=gpu-04" in line
    assert parse_scontrol_job(line).node_list == "gpu-04"


def test_only_the_first_record_is_read():
    info = parse_scontrol_job(sample("scontrol_22.05_o_show_job_all.txt").splitlines()[2])
    assert info.node_list == "gpu-[01,03]"


def test_a_24_11_wrapped_record_parses_too():
    info = parse_scontrol_job(sample("scontrol_24.11_show_job_3_multinode.txt"))
    assert info == JobInfo(node_list="tx-[01-02]", batch_host="tx-01", restarts=0)


def test_a_requeued_24_11_job_reports_its_restarts():
    info = parse_scontrol_job(sample("scontrol_24.11_show_job_5_requeued.txt"))
    assert info == JobInfo(node_list="tx-01", batch_host="tx-01", restarts=1)


def test_a_pending_job_without_nodes_parses_to_none():
    assert parse_scontrol_job(sample("scontrol_22.05_o_show_job_7_pending.txt")) is None
    assert parse_scontrol_job("NodeList=(null) BatchHost=(null)") is None


def fake_scontrol(stdout="", returncode=0, error=None):
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        if error:
            raise error
        return subprocess.CompletedProcess(argv, returncode, stdout=stdout, stderr="")

    run.calls = calls
    return run


def test_scontrol_is_preferred_over_a_stale_slurm_job_nodelist():
    run = fake_scontrol(sample("scontrol_22.05_o_show_job_3_requeued.txt"))
    info = read_job_info("3", {"SLURM_JOB_NODELIST": "gpu-[01-02]"}, run)
    assert info.node_list == "gpu-[01,03]"
    assert run.calls == [["scontrol", "-o", "show", "job", "3"]]


@pytest.mark.parametrize(
    "run",
    [
        fake_scontrol(error=FileNotFoundError("scontrol")),
        fake_scontrol(error=subprocess.TimeoutExpired("scontrol", 15)),
        fake_scontrol(stdout="", returncode=1),
        fake_scontrol(stdout="slurm_load_jobs error: Invalid job id specified", returncode=0),
    ],
    ids=["missing", "timeout", "error", "no-record"],
)
def test_slurm_job_nodelist_is_the_fallback_when_scontrol_fails(run):
    info = read_job_info("3", {"SLURM_JOB_NODELIST": "gpu-[01-02]"}, run)
    assert info == JobInfo(node_list="gpu-[01-02]", batch_host=None, restarts=None)


def test_no_nodes_anywhere_gives_none():
    assert read_job_info("3", {}, fake_scontrol(returncode=1)) is None


def test_master_port_is_derived_from_the_job_id_to_avoid_clashes():
    assert master_port("3") == 20003
    assert master_port("20003") == 20003
    assert master_port("123456") == 23456
    assert master_port(None) == 29500


def test_launch_env_points_every_node_at_the_first_node():
    info = JobInfo(node_list="gpu-[02,05-06]", batch_host="gpu-02", restarts=2)
    env = launch_env({"SLURM_RESTART_COUNT": "2", "HOME": "/home/a"}, "41", info)
    assert env["MASTER_ADDR"] == "gpu-02"
    assert env["MASTER_PORT"] == "20041"
    assert env["NNODES"] == "3"
    assert env["MEDBAY_RESTART_COUNT"] == "2"
    assert env["SLURM_RESTART_COUNT"] == "2"
    assert env["MEDBAY_NODELIST"] == "gpu-[02,05-06]"
    assert env["MEDBAY_BATCH_HOST"] == "gpu-02"
    assert env["HOME"] == "/home/a"


def test_the_first_attempt_counts_as_restart_zero():
    info = JobInfo(node_list="gpu-01", batch_host=None, restarts=None)
    env = launch_env({}, "7", info)
    assert env["MEDBAY_RESTART_COUNT"] == "0"
    assert "SLURM_RESTART_COUNT" not in env


def capture_spawn():
    calls = []

    def spawn(argv, env, torchrun=False):
        calls.append(SimpleNamespace(argv=argv, env=env, torchrun=torchrun))
        return 5

    spawn.calls = calls
    return spawn


def test_launch_runs_one_srun_step_of_itself_per_node_and_returns_its_exit_code():
    options, command = parse_launch_args(
        ["--torchrun", "--nproc-per-node", "8", "--", "t.py", "-x"]
    )
    run = fake_scontrol(sample("scontrol_22.05_o_show_job_3_requeued.txt"))
    spawn = capture_spawn()
    env = {"SLURM_JOB_ID": "3", "SLURM_CPUS_PER_TASK": "16", "SLURM_RESTART_COUNT": "1"}
    assert launch(options, command, env, run=run, spawn=spawn) == 5
    (call,) = spawn.calls
    assert call.argv == [
        "srun",
        "--kill-on-bad-exit=1",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=16",
        sys.executable,
        launcher.__file__,
        "--inner",
        "--torchrun",
        "--nproc-per-node",
        "8",
        "--",
        "t.py",
        "-x",
    ]
    assert call.env["MASTER_ADDR"] == "gpu-01"
    assert call.env["NNODES"] == "2"
    assert call.env["MEDBAY_RESTART_COUNT"] == "1"


def test_launch_outside_a_slurm_job_fails_clearly():
    options, command = parse_launch_args(["--", "python", "t.py"])
    spawn = capture_spawn()
    assert launch(options, command, {}, run=fake_scontrol(), spawn=spawn) == 2
    assert spawn.calls == []


def test_inner_runs_torchrun_with_a_static_rendezvous_from_the_launch_env():
    options, command = parse_launch_args(["--inner", "--torchrun", "--", "t.py", "--lr", "1"])
    env = {
        "NNODES": "2",
        "SLURM_NODEID": "1",
        "MASTER_ADDR": "gpu-01",
        "MASTER_PORT": "20003",
        "SLURM_GPUS_ON_NODE": "4",
    }
    spawn = capture_spawn()
    assert run_inner(options, command, env, spawn=spawn) == 5
    (call,) = spawn.calls
    assert call.argv == [
        "torchrun",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--master_addr",
        "gpu-01",
        "--master_port",
        "20003",
        "--nproc_per_node",
        "4",
        "t.py",
        "--lr",
        "1",
    ]
    assert call.env["NODE_RANK"] == "1"
    assert call.torchrun is True


def test_inner_without_torchrun_runs_the_command_as_given():
    argv = inner_command(["python", "train.py"], torchrun=False, nproc=8, env={})
    assert argv == ["python", "train.py"]


@pytest.mark.parametrize(
    "argv",
    [["python", "t.py"], ["--torchrun"], ["--"], ["--nproc-per-node", "0", "--", "x"]],
)
def test_bad_command_lines_exit_with_usage_errors(argv):
    with pytest.raises(SystemExit) as raised:
        parse_launch_args(argv)
    assert raised.value.code == 2


def test_arguments_after_the_double_dash_belong_to_the_command():
    options, command = parse_launch_args(["--", "train.py", "--torchrun", "--", "x"])
    assert options.torchrun is False
    assert command == ["train.py", "--torchrun", "--", "x"]


def test_the_launcher_imports_only_the_standard_library_and_the_shared_slurm_syntax():
    code = (
        "import sys; import jobs.launcher; "
        "bad = [m for m in ('django', 'torch', 'requests') if m in sys.modules]; "
        "bad += [m for m in sys.modules if m.startswith('django')]; "
        "ours = ('jobs', 'jobs.launcher', 'clusters', 'clusters.backends', "
        "'clusters.backends.slurm_syntax'); "
        "bad += [m for m in sys.modules if m.split('.')[0] not in sys.stdlib_module_names "
        "and not m.startswith(('_', '__')) and m not in ours]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0
