"""Runs Slurm's command-line tools and turns their failures into BackendError.

Commands are argument lists, never shell strings, and every one has a timeout:
a hung controller must not hang the caller.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clusters.backends.base import BackendError

DEFAULT_TIMEOUT_S = 10.0

# Failures that may pass if retried: the controller is restarting, overloaded or
# unreachable. Everything else (unknown job or node, refused request) is permanent.
TRANSIENT_ERROR_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "connection refused",
    "connect failure",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "resource temporarily unavailable",
    "slurmctld not responding",
    "timed out",
    "try again",
)

# Prefixes Slurm's tools put before the message itself.
ERROR_PREFIX = re.compile(
    r"^(?:(?:scontrol|sbatch|scancel|squeue|sinfo|sacct):\s*)?"
    r"(?:(?:error|fatal):\s*)?(?:slurm_\w+ error:\s*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CommandResult:
    """What a finished command printed and returned."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[..., CommandResult]


def run_command(
    args: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Runs ARGS and returns its result; raises BackendError only if it cannot run."""
    try:
        completed = subprocess.run(
            list(args),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise BackendError(f"{args[0]} timed out after {timeout:g}s", permanent=False) from error
    except FileNotFoundError as error:
        raise BackendError(f"{args[0]} is not installed", permanent=True) from error
    return CommandResult(tuple(args), completed.returncode, completed.stdout, completed.stderr)


def slurm_message(result: CommandResult) -> str:
    """The meaningful line of a failed command's output, without tool prefixes."""
    lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines()]
    lines = [ERROR_PREFIX.sub("", line) for line in lines if line]
    # scontrol ping prints its verdict on stdout with a banner; keep the verdict.
    meaningful = [line for line in lines if line and not line.startswith("*")]
    if not meaningful:
        return f"{result.args[0]} exited with status {result.returncode}"
    return "; ".join(dict.fromkeys(meaningful))


def is_transient(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in TRANSIENT_ERROR_MARKERS)


def error_from_result(result: CommandResult) -> BackendError:
    message = slurm_message(result)
    return BackendError(message, permanent=not is_transient(message))
