"""The #SBATCH options of a script as slurmrestd's job description fields."""

from __future__ import annotations

import pytest

from clusters.backends.base import BackendError
from clusters.backends.sbatch_options import job_fields
from jobs.sbatch import JobParams, render_sbatch


def number(value: int) -> dict:
    return {"set": True, "infinite": False, "number": value}


def test_every_option_medbays_own_scripts_write_becomes_a_field():
    script = render_sbatch(
        JobParams(
            job_name="train-llm", partition="train", account="vision", nodes=2,
            gpus_per_node=8, cpus_per_task=4, mem="16G", time_limit=90,
            workdir="/home/alice/run", output="/home/alice/run/%j.out", template="torchrun",
            command="train.py", auto_resume=True, signal_grace_s=120,
            checkpoint_dir="/home/alice/run/ckpt",
        )
    )  # fmt: skip

    fields = job_fields(script)

    assert fields == {
        "name": "train-llm",
        "partition": "train",
        "account": "vision",
        "nodes": "2",
        "tasks_per_node": 1,
        "tres_per_node": "gres/gpu:8",
        "cpus_per_task": 4,
        "memory_per_node": number(16 * 1024),
        "time_limit": number(90),
        "current_working_directory": "/home/alice/run",
        "standard_output": "/home/alice/run/%j.out",
        "kill_warning_signal": "USR1",
        "kill_warning_delay": number(120),
        "kill_warning_flags": ["BATCH_JOB"],
        "requeue": True,
        "open_mode": ["APPEND"],
    }


def test_short_forms_separate_values_and_gpus_per_node_read_as_sbatch_reads_them():
    script = (
        "#!/bin/bash\n# a comment\n\n#SBATCH -J short -p infer -N 1-2 -t 1-00:30:00\n"
        "#SBATCH --gpus-per-node 4 --mem=500 --no-requeue\n"
        "echo start\n#SBATCH --job-name=after-the-first-command-is-not-read\n"
    )

    assert job_fields(script) == {
        "name": "short", "partition": "infer", "nodes": "1-2", "time_limit": number(24 * 60 + 30),
        "tres_per_node": "gres/gpu:4", "memory_per_node": number(500), "requeue": False,
    }  # fmt: skip


def test_a_script_without_options_adds_no_fields():
    assert job_fields("#!/bin/sh\nsleep 1\n") == {}


@pytest.mark.parametrize(
    ("directive", "words"),
    [
        ("--exclusive", "#SBATCH --exclusive cannot be passed to slurmrestd"),
        ("--array=1-3", "#SBATCH --array cannot be passed to slurmrestd"),
        ("-w gpu-01", "#SBATCH -w cannot be passed to slurmrestd"),
        ("--gres=nvme:1", "Medbay passes GPUs only"),
        ("--nodes=two", "expected N or MIN-MAX"),
        ("--mem=lots", "expected a size"),
        ("--cpus-per-task=0", "expected a whole number"),
        ("--time=soon", "not a time limit"),
        ("--job-name=", "needs a value"),
    ],
)
def test_an_option_it_cannot_pass_on_is_refused_for_good_naming_it(directive, words):
    with pytest.raises(BackendError, match=words) as refused:
        job_fields(f"#!/bin/bash\n#SBATCH {directive}\nsleep 1\n")
    assert refused.value.permanent
