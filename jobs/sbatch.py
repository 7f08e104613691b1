"""Render a researcher's job form into an sbatch script, refusing anything that could escape.

Pure functions, no Django: the form, the API and the tests all go through
`validate_params` and `render_sbatch`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields

TEMPLATES = ("torchrun", "python", "custom")
GPU_FLAGS = ("gres", "gpus-per-node")

JOB_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
PARTITION_RE = re.compile(r"[A-Za-z0-9._-]{1,64}(,[A-Za-z0-9._-]{1,64})*")
ACCOUNT_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
ABSOLUTE_PATH_RE = re.compile(r"/[A-Za-z0-9._/@+-]{0,1023}")
# Output patterns may use Slurm's %j/%x/%N placeholders and may be relative to the workdir.
OUTPUT_RE = re.compile(r"[A-Za-z0-9._/@+%][A-Za-z0-9._/@+%-]{0,1023}")
MEM_RE = re.compile(r"[1-9][0-9]{0,8}[KMGT]?")
PORTAL_URL_RE = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{8,512}")

MAX_LINE = 4096
MAX_GRACE_S = 65535  # Slurm stores the --signal lead time in 16 bits.


@dataclass(frozen=True)
class JobParams:
    """What a researcher fills in to submit a training job."""

    job_name: str
    partition: str
    workdir: str
    command: str
    time_limit: int
    template: str = "python"
    account: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_flag: str = "gres"
    cpus_per_task: int = 1
    mem: str | int | None = None
    env_setup: Sequence[str] = ()
    checkpoint_dir: str | None = None
    auto_resume: bool = False
    signal_grace_s: int = 120
    output: str = "%x-%j.out"
    portal_url: str | None = None
    progress_token: str | None = None


class InvalidJobParams(ValueError):
    """Raised by render_sbatch when validate_params found errors."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


def validate_params(params: JobParams) -> dict[str, list[str]]:
    """Return {field: [messages]} for every problem; an empty dict means safe to render."""
    errors: dict[str, list[str]] = {}
    for check in (
        _check_single_lines,
        _check_names,
        _check_paths,
        _check_numbers,
        _check_choices,
        _check_command,
        _check_env_setup,
        _check_resume,
        _check_portal,
    ):
        for field, message in check(params):
            errors.setdefault(field, [])
            if message not in errors[field]:
                errors[field].append(message)
    return errors


def _check_single_lines(p: JobParams):
    # Only the custom body may span lines; a newline anywhere else could start a new
    # #SBATCH directive or a new shell command.
    for f in fields(p):
        value = getattr(p, f.name)
        if not isinstance(value, str):
            continue
        if "\0" in value:
            yield f.name, "Must not contain NUL characters."
        multiline_ok = f.name == "command" and p.template == "custom"
        if not multiline_ok and ("\n" in value or "\r" in value):
            yield f.name, "Must be a single line."


def _check_names(p: JobParams):
    if not _matches(JOB_NAME_RE, p.job_name):
        yield "job_name", "Use 1-64 letters, digits, dots, dashes or underscores."
    if not _matches(PARTITION_RE, p.partition):
        yield "partition", "Use a partition name (letters, digits, dots, dashes, underscores)."
    if p.account is not None and not _matches(ACCOUNT_RE, p.account):
        yield "account", "Use 1-64 letters, digits, dots, dashes or underscores."


def _check_paths(p: JobParams):
    path_message = "Use an absolute path of letters, digits and . _ / @ + - only."
    if not _matches(ABSOLUTE_PATH_RE, p.workdir):
        yield "workdir", path_message
    if p.checkpoint_dir is not None and not _matches(ABSOLUTE_PATH_RE, p.checkpoint_dir):
        yield "checkpoint_dir", path_message
    if not _matches(OUTPUT_RE, p.output):
        yield "output", "Use a path of letters, digits and . _ / @ + - % only, not starting with -."


def _check_numbers(p: JobParams):
    yield from _check_int("nodes", p.nodes, 1, 4096)
    yield from _check_int("gpus_per_node", p.gpus_per_node, 0, 64)
    yield from _check_int("cpus_per_task", p.cpus_per_task, 1, 1024)
    yield from _check_int("time_limit", p.time_limit, 1, 366 * 24 * 60)
    yield from _check_int("signal_grace_s", p.signal_grace_s, 1, MAX_GRACE_S)
    both_ints = _is_int(p.time_limit) and _is_int(p.signal_grace_s)
    if both_ints and p.signal_grace_s >= p.time_limit * 60:
        yield "signal_grace_s", "The checkpoint grace must be shorter than the time limit."
    if p.mem is not None and not _valid_mem(p.mem):
        yield "mem", "Use megabytes as a whole number, or a size such as 32G or 500M."


def _check_int(field: str, value, low: int, high: int):
    if not _is_int(value):
        yield field, "Must be a whole number."
    elif not low <= value <= high:
        yield field, f"Must be between {low} and {high}."


def _check_choices(p: JobParams):
    if p.template not in TEMPLATES:
        yield "template", f"Choose one of: {', '.join(TEMPLATES)}."
    if p.gpu_flag not in GPU_FLAGS:
        yield "gpu_flag", f"Choose one of: {', '.join(GPU_FLAGS)}."
    if not isinstance(p.auto_resume, bool):
        yield "auto_resume", "Must be true or false."


def _check_command(p: JobParams):
    if not isinstance(p.command, str) or not p.command.strip():
        yield "command", "Enter a command."
        return
    if p.template == "custom":
        if _has_sbatch_directive(p.command.splitlines()):
            yield "command", "#SBATCH directives come from the form, not the script body."
        return
    try:
        argv = shlex.split(p.command)
    except ValueError:
        yield "command", "Quotes are not balanced."
        return
    if not argv:
        yield "command", "Enter a command."


def _check_env_setup(p: JobParams):
    if isinstance(p.env_setup, str) or not all(isinstance(line, str) for line in p.env_setup):
        yield "env_setup", "Must be a list of lines."
        return
    for line in p.env_setup:
        if "\n" in line or "\r" in line or "\0" in line:
            yield "env_setup", "Each setup line must be a single line without NUL characters."
        elif len(line) > MAX_LINE:
            yield "env_setup", f"Each setup line must be at most {MAX_LINE} characters."
    if _has_sbatch_directive(p.env_setup):
        yield "env_setup", "#SBATCH directives come from the form, not the setup lines."


def _check_resume(p: JobParams):
    if p.auto_resume is True and p.checkpoint_dir is None:
        yield "checkpoint_dir", "Auto-resume needs a checkpoint directory."


def _check_portal(p: JobParams):
    if p.portal_url is not None and not _matches(PORTAL_URL_RE, p.portal_url):
        yield "portal_url", "Use an http(s) URL without query or credentials."
    if p.progress_token is not None and not _matches(TOKEN_RE, p.progress_token):
        yield "progress_token", "Must be 8-512 URL-safe characters."
    if (p.portal_url is None) != (p.progress_token is None):
        yield "progress_token", "Progress reporting needs both the portal URL and a token."


def _matches(pattern: re.Pattern, value) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _is_int(value) -> bool:
    # bool is an int subclass; True nodes is a form bug, not one node.
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_mem(mem) -> bool:
    if _is_int(mem):
        return 1 <= mem <= 999_999_999
    return _matches(MEM_RE, mem)


def _has_sbatch_directive(lines) -> bool:
    return any(line.lstrip().upper().startswith("#SBATCH") for line in lines)


def render_sbatch(params: JobParams) -> str:
    """Return the batch script for params; raises InvalidJobParams if validation fails."""
    errors = validate_params(params)
    if errors:
        raise InvalidJobParams(errors)
    parts = [
        "#!/bin/bash\n" + render_directives(params),
        render_environment(params),
        render_setup(params),
        render_body(params),
    ]
    return "\n".join(part for part in parts if part)


def render_directives(p: JobParams) -> str:
    options = [
        f"--job-name={p.job_name}",
        f"--partition={p.partition}",
    ]
    if p.account is not None:
        options.append(f"--account={p.account}")
    options.append(f"--nodes={p.nodes}")
    if p.template != "custom":
        # One launcher (srun task) per node; torchrun or the trainer fans out inside it.
        options.append("--ntasks-per-node=1")
    if p.gpus_per_node:
        flag = "--gres=gpu:" if p.gpu_flag == "gres" else "--gpus-per-node="
        options.append(f"{flag}{p.gpus_per_node}")
    options.append(f"--cpus-per-task={p.cpus_per_task}")
    if p.mem is not None:
        options.append(f"--mem={p.mem}M" if _is_int(p.mem) else f"--mem={p.mem}")
    options += [
        f"--time={format_time_limit(p.time_limit)}",
        f"--chdir={p.workdir}",
        f"--output={p.output}",
        f"--signal=B:USR1@{p.signal_grace_s}",
    ]
    if p.auto_resume:
        # Append so a requeued attempt does not truncate the log of the previous one.
        options += ["--requeue", "--open-mode=append"]
    for option in options:
        # Validation already guarantees this; a directive with a space would be split by sbatch.
        if any(ch.isspace() for ch in option):
            raise InvalidJobParams({"directives": [f"Whitespace in {option!r}."]})
    return "".join(f"#SBATCH {option}\n" for option in options)


def format_time_limit(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours:02d}:{mins:02d}:00"


def render_environment(p: JobParams) -> str:
    lines = [
        f"# Rendered by Medbay (template: {p.template}). The first command below ends sbatch's",
        "# directive parsing, so nothing after it can add #SBATCH options.",
        f"export MEDBAY_TEMPLATE={p.template}",
    ]
    if p.checkpoint_dir is not None:
        lines += [
            f"export MEDBAY_CHECKPOINT_DIR={shlex.quote(p.checkpoint_dir)}",
            'mkdir -p "$MEDBAY_CHECKPOINT_DIR"',
        ]
    if p.portal_url is not None:
        lines += [
            f"export MEDBAY_PORTAL_URL={shlex.quote(p.portal_url)}",
            f"export MEDBAY_JOB_TOKEN={shlex.quote(p.progress_token)}",
        ]
    return "\n".join(lines) + "\n"


def render_setup(p: JobParams) -> str:
    if not p.env_setup:
        return ""
    # These lines are the researcher's own shell, run as them; validation only keeps them
    # to one line each and out of the directive block.
    return "# Environment setup\n" + "".join(f"{line}\n" for line in p.env_setup)


def render_body(p: JobParams) -> str:
    if p.template == "custom":
        # Browsers send textareas with CRLF; bash would read the \r as part of each command.
        body = p.command.replace("\r\n", "\n")
        body = body if body.endswith("\n") else body + "\n"
        return CUSTOM_PREAMBLE + body
    return render_launch(launch_command(p), p.template)


def launch_command(p: JobParams) -> str:
    args = " ".join(shlex.quote(arg) for arg in shlex.split(p.command))
    nproc = p.gpus_per_node or 1
    if p.template == "torchrun" and p.auto_resume:
        return f"medbay-launch --torchrun --nproc-per-node {nproc} -- {args}"
    if p.auto_resume:
        return f"medbay-launch -- python {args}"
    # Since Slurm 22.05 srun no longer inherits the job's --cpus-per-task.
    srun = 'srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK"'
    if p.template == "torchrun":
        return (
            f"{srun} torchrun"
            f" --nnodes={p.nodes} --nproc_per_node={nproc}"
            ' --rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d'
            ' --rdzv_endpoint="$head_node:$((20000 + SLURM_JOB_ID % 20000))"'
            f" {args}"
        )
    return f"{srun} python {args}"


CUSTOM_PREAMBLE = """\
# Slurm sends USR1 to this shell before the time limit. The no-op trap keeps it from
# ending the job early; set your own trap below to checkpoint instead.
trap ':' USR1

# Job script
"""


def render_launch(command: str, template: str) -> str:
    lines = []
    if command.startswith("srun") and template == "torchrun":
        lines += [
            'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "# torchrun ignores USR1 by default and its workers run in their own sessions, so",
            "# without this the signal would kill torchrun instead of reaching the trainer.",
            "export TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
        ]
    lines += [
        "# Slurm signals only this shell (B:USR1), and a shell runs its traps only after the",
        "# foreground command returns: so the trainer runs in the background while we wait.",
        "child=",
        "trap 'kill -USR1 \"$child\" 2>/dev/null' USR1",
        "trap 'kill -TERM \"$child\" 2>/dev/null' TERM",
        f"{command} &",
        "child=$!",
        "while :; do",
        '  wait "$child"',
        "  status=$?",
        '  kill -0 "$child" 2>/dev/null || break',
        "done",
        "# A trap can interrupt wait (status > 128) just as the trainer exits; ask once more.",
        'if [ "$status" -gt 128 ]; then',
        '  wait "$child" 2>/dev/null',
        "  last=$?",
        '  [ "$last" -ne 127 ] && status=$last',
        "fi",
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"
