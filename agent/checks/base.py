"""What every node health check shares: its description, its context and its result."""

import enum
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.parsers import nvsmi

# HealthCheckProgram runs with an empty PATH (only SLURMD_NODENAME is set), so tools are
# also looked for in the usual system folders.
SYSTEM_BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin")


class CheckStatus(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Mode(enum.StrEnum):
    PASSIVE = "passive"  # safe alongside running jobs
    ACTIVE = "active"  # needs the node or GPUs idle


class ToolMissing(Exception):
    """A command or data source the check needs is not on this node: the check skips."""


class CheckFailed(Exception):
    """Raised inside a probe to fail the check with exactly this message."""


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    message: str
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    message: str
    data: dict = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == CheckStatus.FAIL


def passed(message: str, **data) -> Verdict:
    return Verdict(CheckStatus.PASS, message, data)


def warned(message: str, **data) -> Verdict:
    return Verdict(CheckStatus.WARN, message, data)


def failed(message: str, **data) -> Verdict:
    return Verdict(CheckStatus.FAIL, message, data)


def skipped(message: str, **data) -> Verdict:
    return Verdict(CheckStatus.SKIP, message, data)


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""


# run(argv, timeout_s, env) -> CommandOutput; raises FileNotFoundError when the program is
# missing and subprocess.TimeoutExpired when it runs too long.
CommandRunner = Callable[[Sequence[str], float, Mapping[str, str] | None], CommandOutput]


def run_subprocess(
    argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> CommandOutput:
    completed = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )
    return CommandOutput(completed.returncode, completed.stdout, completed.stderr)


@dataclass
class CheckContext:
    """Everything a check reads, so tests can substitute fake trees and command outputs.

    `config` is the agent's parsed config file (see agent/config.py for its keys).
    """

    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    run: CommandRunner = run_subprocess
    config: dict = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] | None = None
    cache: dict = field(default_factory=dict)

    def section(self, name: str) -> dict:
        value = self.config.get(name)
        return value if isinstance(value, dict) else {}

    def tool(self, name: str) -> str:
        """Absolute path of a tool, from config `[tools]`, PATH or the system folders."""
        if self.which is not None:
            found = self.which(name)
        else:
            found = self.section("tools").get(name) or _which(name, self.env.get("PATH", ""))
        if not found:
            raise ToolMissing(f"{name} not found")
        return found

    def run_tool(self, name: str, args: Sequence[str], timeout_s: float) -> CommandOutput:
        argv = [self.tool(name), *args]
        try:
            return self.run(argv, timeout_s, self.tool_env())
        except FileNotFoundError as error:
            raise ToolMissing(f"{name} not found ({argv[0]})") from error

    def tool_env(self) -> dict[str, str] | None:
        slurm_conf = self.config.get("slurm_conf")
        return {"SLURM_CONF": slurm_conf} if slurm_conf else None

    def node_name(self) -> str | None:
        return self.config.get("node") or self.env.get("SLURMD_NODENAME")

    def nvsmi_report(self, timeout_s: float) -> nvsmi.NvsmiReport:
        """`nvidia-smi -q -x`, run once per context and shared by the GPU checks."""
        if "nvsmi" not in self.cache:
            self.cache["nvsmi"] = _query_nvidia_smi(self, timeout_s)
        outcome = self.cache["nvsmi"]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _which(name: str, path: str) -> str | None:
    search = os.pathsep.join(part for part in (path, *SYSTEM_BIN_DIRS) if part)
    return shutil.which(name, path=search)


class NvidiaSmiError(CheckFailed):
    """nvidia-smi ran but failed, hung or printed something unreadable."""


def _query_nvidia_smi(ctx: CheckContext, timeout_s: float):
    # The outcome, good or bad, is cached so a hung nvidia-smi costs one timeout, not four.
    try:
        output = ctx.run_tool("nvidia-smi", ["-q", "-x"], timeout_s)
    except ToolMissing as error:
        return error
    except subprocess.TimeoutExpired:
        return NvidiaSmiError(f"nvidia-smi did not answer within {timeout_s:g}s")
    if output.returncode != 0:
        meaning = nvsmi.parse_exit_code(output.returncode)
        return NvidiaSmiError(f"nvidia-smi exited {output.returncode}: {meaning}")
    try:
        return nvsmi.parse_xml(output.stdout)
    except ValueError as error:
        return NvidiaSmiError(str(error))


@dataclass(frozen=True)
class Check:
    name: str
    detects: str
    mode: Mode
    timeout_s: float
    probe: Callable[[CheckContext, float], Verdict]

    def run(self, ctx: CheckContext) -> CheckResult:
        """Run the probe; a missing tool is a skip and any other error is a failure."""
        started = time.monotonic()
        try:
            verdict = self.probe(ctx, self.timeout_s)
        except ToolMissing as error:
            verdict = skipped(str(error))
        except CheckFailed as error:
            verdict = failed(str(error))
        except Exception as error:  # noqa: BLE001 - a broken check must report, not crash
            verdict = failed(f"{type(error).__name__}: {error}")
        return CheckResult(
            name=self.name,
            status=verdict.status,
            message=verdict.message,
            data=verdict.data,
            duration_s=round(time.monotonic() - started, 3),
        )


def run_checks(checks: Sequence[Check], ctx: CheckContext) -> list[CheckResult]:
    return [check.run(ctx) for check in checks]
