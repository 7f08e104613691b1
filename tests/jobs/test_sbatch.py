"""sbatch rendering: golden scripts per template, validation, and hostile input."""

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.sbatch import (
    InvalidJobParams,
    format_time_limit,
    render_sbatch,
    validate_params,
)

from .params import CUSTOM_BODY, GOLDEN, PYTHON_SINGLE_NODE, TORCHRUN_MULTINODE_RESUME

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sbatch"


def replace(params, **changes):
    return dataclasses.replace(params, **changes)


def directives(script):
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_template_renders_exactly_its_golden_script(name):
    expected = (FIXTURES / name).read_text()
    assert render_sbatch(GOLDEN[name]) == expected


@pytest.mark.parametrize("params", GOLDEN.values(), ids=sorted(GOLDEN))
def test_golden_params_are_valid(params):
    assert validate_params(params) == {}


@pytest.mark.parametrize(
    ("minutes", "rendered"),
    [
        (1, "00:01:00"),
        (90, "01:30:00"),
        (1439, "23:59:00"),
        (1440, "1-00:00:00"),
        (2160, "1-12:00:00"),
        (7 * 1440 + 5, "7-00:05:00"),
    ],
)
def test_time_limits_render_as_slurm_durations(minutes, rendered):
    assert format_time_limit(minutes) == rendered


def test_auto_resume_adds_requeue_append_and_the_usr1_grace():
    lines = directives(render_sbatch(TORCHRUN_MULTINODE_RESUME))
    assert "#SBATCH --requeue" in lines
    assert "#SBATCH --open-mode=append" in lines
    assert "#SBATCH --signal=B:USR1@300" in lines


def test_without_auto_resume_there_is_no_requeue_but_still_a_usr1_grace():
    lines = directives(render_sbatch(PYTHON_SINGLE_NODE))
    assert "#SBATCH --requeue" not in lines
    assert "#SBATCH --open-mode=append" not in lines
    assert "#SBATCH --signal=B:USR1@120" in lines


def test_gpu_flag_chooses_between_gres_and_gpus_per_node():
    gres = render_sbatch(replace(PYTHON_SINGLE_NODE, gpu_flag="gres", gpus_per_node=4))
    per_node = render_sbatch(replace(PYTHON_SINGLE_NODE, gpu_flag="gpus-per-node", gpus_per_node=4))
    assert "#SBATCH --gres=gpu:4" in directives(gres)
    assert "#SBATCH --gpus-per-node=4" in directives(per_node)
    no_gpus = directives(render_sbatch(replace(PYTHON_SINGLE_NODE, gpus_per_node=0)))
    assert not any("gpu" in line for line in no_gpus)


def test_memory_in_megabytes_or_with_a_unit():
    assert "#SBATCH --mem=16000M" in directives(render_sbatch(PYTHON_SINGLE_NODE))
    assert "#SBATCH --mem=32G" in directives(render_sbatch(replace(PYTHON_SINGLE_NODE, mem="32G")))
    unlimited = directives(render_sbatch(replace(PYTHON_SINGLE_NODE, mem=None)))
    assert not any("--mem" in line for line in unlimited)


def test_python_template_with_auto_resume_runs_through_the_launcher():
    params = replace(PYTHON_SINGLE_NODE, auto_resume=True, checkpoint_dir="/home/bob/ckpt")
    script = render_sbatch(params)
    assert "medbay-launch -- python eval.py --split 'val set'" in script
    assert "srun" not in script


def test_torchrun_without_auto_resume_runs_srun_with_a_c10d_rendezvous():
    script = render_sbatch(replace(TORCHRUN_MULTINODE_RESUME, auto_resume=False))
    assert "medbay-launch" not in script
    assert "torchrun --nnodes=2 --nproc_per_node=8" in script
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" in script


def test_auto_resume_without_a_checkpoint_dir_is_refused():
    errors = validate_params(replace(PYTHON_SINGLE_NODE, auto_resume=True))
    assert "checkpoint_dir" in errors


def test_the_checkpoint_dir_is_exported_to_the_trainer():
    script = render_sbatch(TORCHRUN_MULTINODE_RESUME)
    assert "export MEDBAY_CHECKPOINT_DIR=/scratch/alice/checkpoints/llm-pretrain" in script


def test_invalid_params_are_refused_by_render_with_the_field_errors():
    with pytest.raises(InvalidJobParams) as raised:
        render_sbatch(replace(PYTHON_SINGLE_NODE, job_name="$(id)", nodes=0))
    assert set(raised.value.errors) == {"job_name", "nodes"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nodes", 0),
        ("nodes", True),
        ("nodes", "2"),
        ("gpus_per_node", -1),
        ("cpus_per_task", 0),
        ("time_limit", 0),
        ("signal_grace_s", 0),
        ("signal_grace_s", 90 * 60),
        ("mem", "32 G"),
        ("mem", 0),
        ("template", "bash"),
        ("gpu_flag", "gpus"),
        ("command", "   "),
        ("command", "train.py 'unbalanced"),
        ("auto_resume", "yes"),
        ("env_setup", "module load cuda"),
    ],
)
def test_out_of_range_and_malformed_values_are_field_errors(field, value):
    errors = validate_params(replace(PYTHON_SINGLE_NODE, **{field: value}))
    assert field in errors
    assert all(isinstance(message, str) and message for message in errors[field])


HOSTILE_NAMES = [
    "x; rm -rf /",
    "$(id)",
    "`id`",
    "a\n#SBATCH --uid=0",
    "a\r#SBATCH --uid=0",
    "name with space",
    "x" * 65,
    "",
    "nul\0byte",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_job_names_are_refused(name):
    assert "job_name" in validate_params(replace(PYTHON_SINGLE_NODE, job_name=name))


@pytest.mark.parametrize("field", ["partition", "account"])
@pytest.mark.parametrize("value", ["gpu --uid=0", "gpu\n#SBATCH --uid=0", "$(id)", "gpu;id"])
def test_hostile_partitions_and_accounts_are_refused(field, value):
    assert field in validate_params(replace(PYTHON_SINGLE_NODE, **{field: value}))


HOSTILE_PATHS = [
    "relative/dir",
    "/scratch/my dir",
    "/scratch/it's",
    '/scratch/"quoted"',
    "/scratch/$(id)",
    "/scratch/`id`",
    "/scratch/a;b",
    "/scratch/a\n#SBATCH --uid=0",
    "/scratch/a\tb",
    "/scratch/~alice",
]


@pytest.mark.parametrize("field", ["workdir", "checkpoint_dir"])
@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_are_refused(field, path):
    assert field in validate_params(replace(PYTHON_SINGLE_NODE, **{field: path}))


@pytest.mark.parametrize("output", ["--uid=0", "/logs/a b.out", "/logs/$(id).out", "a\nb"])
def test_hostile_output_patterns_are_refused(output):
    assert "output" in validate_params(replace(PYTHON_SINGLE_NODE, output=output))


@pytest.mark.parametrize(
    "lines",
    [
        ["module load cuda\n#SBATCH --uid=0"],
        ["#SBATCH --uid=0"],
        ["  #sbatch --uid=0"],
        ["export A=1\rexport B=2"],
        ["export A=\0"],
    ],
)
def test_setup_lines_cannot_add_directives_or_span_lines(lines):
    assert "env_setup" in validate_params(replace(PYTHON_SINGLE_NODE, env_setup=lines))


def test_a_custom_body_cannot_add_directives_or_nul():
    sneaky = replace(CUSTOM_BODY, command="srun hostname\n#SBATCH --uid=0\n")
    assert "command" in validate_params(sneaky)
    assert "command" in validate_params(replace(CUSTOM_BODY, command="srun hostname\0"))


def test_a_multiline_command_is_refused_outside_the_custom_template():
    params = replace(PYTHON_SINGLE_NODE, command="train.py\nrm -rf /")
    assert "command" in validate_params(params)


def test_a_custom_body_sent_with_crlf_renders_with_plain_newlines():
    params = replace(CUSTOM_BODY, command="srun hostname\r\nsrun date\r\n")
    assert "srun hostname\nsrun date\n" in render_sbatch(params)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("portal_url", "javascript:alert(1)"),
        ("portal_url", "file:///etc/passwd"),
        ("portal_url", "https://user:pw@medbay.example.org"),
        ("portal_url", "https://medbay.example.org/?a=$(id)"),
        ("progress_token", "tok en with spaces"),
        ("progress_token", "short"),
        ("progress_token", "tok'; id #"),
    ],
)
def test_hostile_portal_settings_are_refused(field, value):
    params = replace(TORCHRUN_MULTINODE_RESUME, **{field: value})
    assert field in validate_params(params)


def test_a_token_without_a_portal_url_is_refused():
    params = replace(TORCHRUN_MULTINODE_RESUME, portal_url=None)
    assert "progress_token" in validate_params(params)


@pytest.mark.parametrize("params", [*GOLDEN.values()], ids=sorted(GOLDEN))
def test_no_directive_value_contains_whitespace(params):
    for line in directives(render_sbatch(params)):
        option = line.removeprefix("#SBATCH ")
        assert option and not any(ch.isspace() for ch in option), line


SHELL_METACHARACTERS = "train.py ';' 'rm -rf /' '$(id)' '`id`' '\"q\"' \"it's\" '&&' '|' '>x'"
LITERAL_ARGV = ["train.py", ";", "rm -rf /", "$(id)", "`id`", '"q"', "it's", "&&", "|", ">x"]


def test_shell_metacharacters_in_arguments_are_quoted_into_literal_arguments():
    script = render_sbatch(replace(PYTHON_SINGLE_NODE, command=SHELL_METACHARACTERS))
    launch = next(line for line in script.splitlines() if line.startswith("srun "))
    assert shlex.split(launch.removesuffix(" &"))[-len(LITERAL_ARGV) :] == LITERAL_ARGV


def fake_bin(tmp_path, name, body):
    """Put an executable Python script called name on a private PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return bin_dir


RECORD_ARGV = """\
import json, os, sys
with open(os.environ["ARGV_LOG"], "w") as f:
    json.dump(sys.argv[1:], f)
"""


def run_script(script, tmp_path, bin_dir, **env):
    path = tmp_path / "job.sh"
    path.write_text(script)
    full_env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_CPUS_PER_TASK": "4",
        **env,
    }
    return subprocess.Popen(["bash", str(path)], env=full_env, cwd=tmp_path)


def test_the_rendered_script_hands_srun_the_arguments_literally(tmp_path):
    bin_dir = fake_bin(tmp_path, "srun", RECORD_ARGV)
    params = replace(PYTHON_SINGLE_NODE, command=SHELL_METACHARACTERS, env_setup=())
    argv_log = tmp_path / "argv.json"
    job = run_script(render_sbatch(params), tmp_path, bin_dir, ARGV_LOG=str(argv_log))
    assert job.wait(timeout=30) == 0
    argv = json.loads(argv_log.read_text())
    assert argv == ["--kill-on-bad-exit=1", "--cpus-per-task=4", "python", *LITERAL_ARGV]
    assert not (tmp_path / "x").exists()


TRAINER_ON_USR1 = """\
import os, pathlib, signal, sys, time
marker = pathlib.Path(os.environ["USR1_MARKER"])
signal.signal(signal.SIGUSR1, lambda *_: (marker.write_text("checkpoint"), sys.exit(7)))
pathlib.Path(os.environ["READY"]).write_text("ready")
time.sleep(60)
"""


def wait_for(path, timeout=20):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_the_rendered_script_forwards_usr1_to_the_trainer_and_returns_its_exit_code(tmp_path):
    bin_dir = fake_bin(tmp_path, "srun", TRAINER_ON_USR1)
    marker, ready = tmp_path / "usr1", tmp_path / "ready"
    params = replace(PYTHON_SINGLE_NODE, env_setup=())
    job = run_script(
        render_sbatch(params), tmp_path, bin_dir, USR1_MARKER=str(marker), READY=str(ready)
    )
    wait_for(ready)
    # What --signal=B:USR1@grace does: signal the batch shell alone.
    job.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=30) == 7
    assert marker.read_text() == "checkpoint"


def test_a_custom_script_survives_the_usr1_grace_signal(tmp_path):
    ready = tmp_path / "ready"
    body = f"touch {ready}\nsleep 1\necho done > {tmp_path / 'done'}\n"
    params = replace(CUSTOM_BODY, command=body, checkpoint_dir=None)
    job = run_script(render_sbatch(params), tmp_path, tmp_path)
    wait_for(ready)
    job.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=30) == 0
    assert (tmp_path / "done").read_text() == "done\n"
