"""A batch script's #SBATCH options as slurmrestd's job description.

sbatch reads the `#SBATCH` lines at the top of a script; slurmrestd does not: a
script posted to `job/submit` runs with only the fields of the job description
(seen on 24.11: a script asking for `--job-name`, `--partition=train` and
`--gres=gpu:1` ran nameless, with no GPU). So the REST backend reads the options
itself and sends them as fields. Only the options Medbay's own scripts use (and
their short forms) are known; any other is refused, never silently dropped,
since a job running without what it asked for is worse than one not submitted.

Field names and shapes are data_parser v0.0.40 and later (24.11 offers up to
v0.0.42, 26.05 v0.0.45); numbers that may be unset are `{set, number}` objects.
Plain Python: no Django import.
"""

from __future__ import annotations

import re
from typing import Any

from clusters.backends.base import BackendError
from clusters.backends.slurm_syntax import duration_minutes

# Short forms sbatch accepts for the long options below.
SHORT_OPTIONS = {
    "-J": "--job-name",
    "-p": "--partition",
    "-A": "--account",
    "-N": "--nodes",
    "-n": "--ntasks",
    "-c": "--cpus-per-task",
    "-t": "--time",
    "-o": "--output",
    "-e": "--error",
    "-D": "--chdir",
    "-q": "--qos",
}
FLAGS = {"--requeue": ("requeue", True), "--no-requeue": ("requeue", False)}
TEXT_FIELDS = {
    "--job-name": "name",
    "--partition": "partition",
    "--account": "account",
    "--qos": "qos",
    "--chdir": "current_working_directory",
    "--output": "standard_output",
    "--error": "standard_error",
}
COUNT_FIELDS = {
    "--ntasks-per-node": "tasks_per_node",
    "--ntasks": "tasks",
    "--cpus-per-task": "cpus_per_task",
}
WITH_VALUE = {
    *TEXT_FIELDS, *COUNT_FIELDS, "--nodes", "--gres", "--gpus-per-node", "--mem", "--time",
    "--signal", "--open-mode",
}  # fmt: skip
MEMORY = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
MEMORY_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
SIGNAL = re.compile(r"^(?:(B|R|RB|BR):)?(?:SIG)?([A-Z0-9]+)(?:@(\d+))?$", re.IGNORECASE)
GPU_GRES = re.compile(r"^gpu(?::[A-Za-z0-9_.-]+)?:\d+$")


def directive_lines(script: str) -> list[str]:
    """The #SBATCH lines sbatch would read: those before the script's first command."""
    lines = []
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # sbatch stops reading options at the first command
        if stripped.startswith("#SBATCH"):
            lines.append(stripped.removeprefix("#SBATCH").strip())
    return lines


def options_of(script: str) -> list[tuple[str, str | None]]:
    """(long option, value or None) for each option of the script's #SBATCH lines."""
    options = []
    for line in directive_lines(script):
        words = line.split()
        while words:
            word = words.pop(0)
            if word.startswith("--"):
                name, equals, value = word.partition("=")
                if name in FLAGS:
                    options.append((name, None))
                    continue
                if name not in WITH_VALUE:
                    raise _refused(name)
                if not equals:
                    value = words.pop(0) if words else ""
                options.append((name, value))
            elif word[:2] in SHORT_OPTIONS:
                value = word[2:] or (words.pop(0) if words else "")
                options.append((SHORT_OPTIONS[word[:2]], value))
            else:
                raise _refused(word)
    return options


def job_fields(script: str) -> dict[str, Any]:
    """The job description fields that say what the script's #SBATCH lines say."""
    fields: dict[str, Any] = {}
    for name, value in options_of(script):
        if name in FLAGS:
            key, flag = FLAGS[name]
            fields[key] = flag
            continue
        if not value:
            raise BackendError(f"#SBATCH {name} needs a value", permanent=True)
        fields.update(_field(name, value))
    return fields


def _field(name: str, value: str) -> dict[str, Any]:
    if name in TEXT_FIELDS:
        return {TEXT_FIELDS[name]: value}
    if name in COUNT_FIELDS:
        return {COUNT_FIELDS[name]: _count(name, value)}
    if name == "--nodes":
        if not re.fullmatch(r"\d+(-\d+)?", value):
            raise BackendError(f"#SBATCH --nodes={value}: expected N or MIN-MAX", permanent=True)
        return {"nodes": value}
    if name in ("--gres", "--gpus-per-node"):
        return {"tres_per_node": _gpus(name, value)}
    if name == "--mem":
        return {"memory_per_node": _number(_megabytes(value))}
    if name == "--time":
        try:
            minutes = duration_minutes(value)
        except ValueError:
            raise BackendError(
                f"#SBATCH --time={value}: not a time limit", permanent=True
            ) from None
        unlimited = {"set": True, "infinite": True, "number": 0}
        return {"time_limit": unlimited if minutes is None else _number(minutes)}
    if name == "--signal":
        return _signal(value)
    if name == "--open-mode":
        if value.lower() not in ("append", "truncate"):
            raise BackendError(f"#SBATCH --open-mode={value}: append or truncate", permanent=True)
        return {"open_mode": [value.upper()]}
    raise _refused(name)


def _number(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": value}


def _count(name: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise BackendError(f"#SBATCH {name}={value}: expected a whole number", permanent=True)
    return int(value)


def _gpus(name: str, value: str) -> str:
    if name == "--gpus-per-node":
        return f"gres/gpu:{_count(name, value)}"
    if not GPU_GRES.match(value):
        raise BackendError(
            f"#SBATCH --gres={value}: Medbay passes GPUs only (gpu:N or gpu:TYPE:N) to slurmrestd",
            permanent=True,
        )
    return f"gres/{value}"


def _megabytes(value: str) -> int:
    match = MEMORY.match(value)
    if not match:
        raise BackendError(
            f"#SBATCH --mem={value}: expected a size such as 8000M or 8G", permanent=True
        )
    return max(1, round(int(match.group(1)) * MEMORY_MB[match.group(2).upper()]))


def _signal(value: str) -> dict[str, Any]:
    match = SIGNAL.match(value)
    if not match:
        raise BackendError(
            f"#SBATCH --signal={value}: expected [B:]SIGNAL[@SECONDS]", permanent=True
        )
    where, signal, seconds = match.groups()
    fields: dict[str, Any] = {
        "kill_warning_signal": signal.upper(),
        # sbatch's default when no time is given.
        "kill_warning_delay": _number(int(seconds) if seconds else 60),
    }
    if where and "B" in where.upper():
        fields["kill_warning_flags"] = ["BATCH_JOB"]
    return fields


def _refused(option: str) -> BackendError:
    return BackendError(
        f"#SBATCH {option} cannot be passed to slurmrestd, which does not read #SBATCH "
        "lines itself; Medbay passes the options of the job form only",
        permanent=True,
    )
