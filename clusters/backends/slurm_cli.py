"""Runs Slurm's command-line tools and turns their failures into BackendError.

Commands are argument lists, never shell strings, and every one has a timeout:
a hung controller must not hang the caller.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clusters.backends.base import BackendError

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0

# The tools a command is counted under (wrappers such as runuser and sudo are
# looked through); anything else is "other", which keeps metric labels bounded.
SLURM_TOOLS = ("sinfo", "squeue", "scontrol", "sbatch", "scancel", "sacct", "sacctmgr", "sdiag")

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

# Called with (tool, seconds, failed) after every command; the portal counts
# them for /metrics. Plain callables keep this module free of Django.
CommandObserver = Callable[[str, float, bool], None]
_observers: list[CommandObserver] = []


def add_command_observer(observer: CommandObserver) -> None:
    if observer not in _observers:
        _observers.append(observer)


def command_tool(args: Sequence[str]) -> str:
    """The Slurm tool ARGS runs, through runuser/sudo wrappers; "other" if none."""
    for arg in args:
        name = str(arg).rsplit("/", 1)[-1]
        if name in SLURM_TOOLS:
            return name
    return "other"


def _notify(args: Sequence[str], seconds: float, failed: bool) -> None:
    tool = command_tool(args)
    for observer in tuple(_observers):
        try:
            observer(tool, seconds, failed)
        except Exception:  # counting must never fail the Slurm call it counts
            logger.warning("Slurm command observer failed", exc_info=True)


def run_command(
    args: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Runs ARGS and returns its result; raises BackendError only if it cannot run."""
    started = time.monotonic()
    failed = True
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
        failed = completed.returncode != 0
    except subprocess.TimeoutExpired as error:
        raise BackendError(f"{args[0]} timed out after {timeout:g}s", permanent=False) from error
    except FileNotFoundError as error:
        raise BackendError(f"{args[0]} is not installed", permanent=True) from error
    finally:
        _notify(args, time.monotonic() - started, failed)
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
