"""ClusterBackend over Slurm's command-line tools (sinfo, squeue, scontrol, sbatch, scancel).

Reads use JSON where the installed Slurm offers it and `scontrol -o` text
otherwise; actions are plain `scontrol`/`scancel`/`sbatch` calls. Plain Python:
no Django import, so the node agent and tests can use it directly.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec

from clusters.backends import slurm_accounting
from clusters.backends.base import (
    AccountingRecord,
    BackendError,
    FileTail,
    JobInfo,
    JobOutputPaths,
    JobSubmission,
    NodeInfo,
    PartitionInfo,
)
from clusters.backends.capabilities import (
    CHECK_HOLD_PREFIX,
    ChecksRunOnThisHost,
    HoldsNodesForChecks,
    ReadsConfiguredPartitions,
    ReadsControllerGeneration,
    ReadsExpectedStarts,
    RunsSlurmCommands,
)
from clusters.backends.job_files import output_paths_from_record, read_tail_as, run_lossless
from clusters.backends.slurm_cli import (
    DEFAULT_TIMEOUT_S,
    CommandResult,
    Runner,
    error_from_result,
    run_command,
)
from clusters.backends.slurm_parsers import (
    JobListParser,
    decode_jobs_json,
    parse_nodes_json,
    parse_private_data,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_scontrol_records,
    parse_slurm_conf_node_addresses,
    parse_slurm_conf_partitions,
    parse_slurm_version,
    parse_squeue_starts,
)
from clusters.backends.slurm_parsers.values import plain_number

# `scontrol show ... --json` arrived in 23.02; 21.08 to 22.05 only have sinfo/squeue --json.
SCONTROL_JSON_SINCE = (23, 2)
SINFO_JSON_SINCE = (21, 8)

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
RECONFIGURE_COUNT = re.compile(r"REQUEST_RECONFIGURE\s+\(\s*\d+\)\s+count:(\d+)")
OUTPUT_MODES = ("auto", "json", "text")
# Slurm's times have whole-second resolution: two seconds after the requeue's
# timestamp is surely a later second than the revoked credential's.
RELEASE_AFTER_REQUEUE = timedelta(seconds=2)

# What `scontrol update state=resume` says of a node that needs no resume: 22.05
# "Invalid node state specified", 26.05 "Invalid node state transition".
# A maintenance hold ends by itself after this, should nobody delete it.
CHECK_HOLD_MINUTES = 120
RESUME_REFUSALS = ("Invalid node state specified", "Invalid node state transition")

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SAFE_USER = re.compile(r"^[a-z_][a-z0-9_.-]*\$?$")
SAFE_SIGNAL = re.compile(r"^(?:SIG)?[A-Z0-9]+$")
SAFE_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def decode_json(text: str) -> Any:
    """Slurm's JSON, decoded with msgspec: a 1,000-node `squeue --json` is tens of MB,
    and the standard library's decoder was most of a sync cycle."""
    return msgspec.json.decode(text)


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: an address that is always this host."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def utc_now() -> datetime:
    return datetime.now(UTC)


class SlurmBackend(
    RunsSlurmCommands,
    ReadsConfiguredPartitions,
    ReadsControllerGeneration,
    ChecksRunOnThisHost,
    HoldsNodesForChecks,
    ReadsExpectedStarts,
):
    """Reads and acts on a real Slurm cluster through its CLI; it also reads slurm.conf
    and slurmctld's restarts, knows when its nodes are this very host, holds a node
    in a maintenance reservation while Medbay checks it, and reads the scheduler's
    expected start of pending jobs."""

    name = "slurm"

    def __init__(
        self,
        slurm_conf: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        output: str = "auto",
        runner: Runner = run_command,
        local_tz: tzinfo | None = None,
        clock: Callable[[], datetime] = utc_now,
        file_runner: Runner = run_lossless,
    ) -> None:
        if output not in OUTPUT_MODES:
            raise ValueError(f"output must be one of {OUTPUT_MODES}, not {output!r}")
        self.slurm_conf = slurm_conf or os.environ.get("SLURM_CONF", "")
        self.timeout = timeout
        self.output = output
        self.runner = runner
        self.local_tz = local_tz
        self.clock = clock
        self.file_runner = file_runner
        self.job_list_parser = JobListParser()

    # ------------------------------------------------------------ running commands

    def command_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        env.update(extra or {})
        return env

    def execute(self, args: Sequence[str], *, input_text: str | None = None) -> CommandResult:
        return self.runner(
            args, input_text=input_text, timeout=self.timeout, env=self.command_env()
        )

    def run(self, args: Sequence[str], *, input_text: str | None = None) -> str:
        """stdout of ARGS; BackendError with Slurm's own message when it fails."""
        try:
            result = self.execute(args, input_text=input_text)
        except BackendError as error:
            raise self.named_outage(error) from error
        if result.returncode != 0:
            raise error_from_result(result)
        return result.stdout

    def named_outage(self, error: BackendError) -> BackendError:
        """A timed-out command, named for what it usually is. From 24.11 on, the client
        tools retry a stopped slurmctld for about MessageTimeout (10 s) before saying
        "Unable to contact slurm controller", so our own timeout fires first; `scontrol
        ping` answers at once either way and tells an outage from a slow controller."""
        if error.permanent or self.controller_up():
            return error
        return BackendError(
            f"Unable to contact slurm controller (scontrol ping: DOWN; {error})", permanent=False
        )

    def run_json(
        self, args: Sequence[str], decode: Callable[[str], Any] = decode_json
    ) -> dict[str, Any]:
        output = self.run(args)
        try:
            payload = decode(output)
        except msgspec.MsgspecError as error:
            raise BackendError(
                f"{args[0]} printed invalid JSON: {error}", permanent=True
            ) from error
        raise_json_errors(args, payload)
        return payload

    # ------------------------------------------------------------ version

    @cached_property
    def slurm_version(self) -> tuple[int, int]:
        """(major, minor) of the installed Slurm, e.g. (22, 5); asked once."""
        return parse_slurm_version(self.run(["sinfo", "--version"]))

    def uses_json(self, since: tuple[int, int]) -> bool:
        if self.output != "auto":
            return self.output == "json"
        return self.slurm_version >= since

    def controller_up(self) -> bool:
        """True when `scontrol ping` says the primary controller is UP."""
        try:
            result = self.execute(["scontrol", "ping"])
        except BackendError:
            return False
        return result.returncode == 0 and "is UP" in result.stdout

    # ------------------------------------------------------------ reads

    def nodes(self) -> list[NodeInfo]:
        if not self.uses_json(SINFO_JSON_SINCE):
            text = self.run(["scontrol", "-o", "-d", "show", "node"])
            return parse_scontrol_nodes(text, self.local_tz)
        if self.slurm_version >= SCONTROL_JSON_SINCE:
            return parse_nodes_json(self.run_json(["scontrol", "show", "node", "--json"]))
        # 22.05's sinfo --json is really the node list (one record per node).
        return parse_nodes_json(self.run_json(["sinfo", "--json"]))

    def partitions(self) -> list[PartitionInfo]:
        # Text on every version: 24.11's JSON does not say which partition is the default.
        return parse_scontrol_partitions(self.run(["scontrol", "-o", "show", "partition"]))

    def jobs(self) -> list[JobInfo]:
        """Every job slurmctld holds, including finished ones not yet purged (MinJobAge)."""
        if not self.uses_json(SINFO_JSON_SINCE):
            # -d adds JOB_GRES, the only GPU count when accounting does not track gres/gpu.
            text = self.run(["scontrol", "-o", "-d", "show", "job"])
            return parse_scontrol_jobs(text, self.local_tz)
        if self.slurm_version >= SCONTROL_JSON_SINCE:
            args = ["scontrol", "show", "job", "--json"]
        else:
            # 22.05's squeue --json ignores filters and also lists finished jobs in memory.
            args = ["squeue", "--json"]
        payload = self.run_json(args, decode=decode_jobs_json)
        raise_if_no_controller_answered(args, payload)
        return self.job_list_parser.parse(payload)

    def job(self, job_id: int) -> JobInfo:
        """One job, read as text so that it also works while the list is large."""
        text = self.run(["scontrol", "-o", "-d", "show", "job", str(int(job_id))])
        jobs = [job for job in parse_scontrol_jobs(text, self.local_tz) if job.job_id == job_id]
        if not jobs:
            raise BackendError(f"Invalid job id specified for job {job_id}", permanent=True)
        return jobs[0]

    def expected_starts(self) -> dict[int, datetime]:
        """When slurmctld expects each pending job to start (`squeue --start`), as text
        on every version: the JSON of 22.05 ignores `--start`."""
        text = self.run(["squeue", "--start", "--noheader", "--states=PENDING", "--format=%i|%S"])
        return parse_squeue_starts(text, self.local_tz)

    def finished_jobs(self, start: datetime, end: datetime) -> list[AccountingRecord]:
        """Job attempts that ended in [start, end), from slurmdbd (see slurm_accounting.py)."""
        return slurm_accounting.finished_jobs(self, start, end)

    def private_data(self) -> frozenset[str]:
        """What the controller's PrivateData hides from ordinary users (`jobs`, `usage`, ...)."""
        return parse_private_data(self.run(["scontrol", "show", "config"]))

    def controller_generation(self) -> str:
        """slurmctld's BOOT_TIME and the REQUEST_RECONFIGURE count sdiag reports: both
        a restart and `scontrol reconfigure` put partitions back to slurm.conf, and
        neither leaves another trace. A partition change seen while these stay the
        same is a person's edit. (sdiag's counts also reset at midnight, which at
        worst reads one person's edit as Slurm's.)"""
        boot = ""
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "BOOT_TIME":
                boot = value.strip()
        if not boot:
            return ""
        try:
            stats = self.run(["sdiag"])
        except BackendError:
            return boot  # sdiag needs operator rights; restarts are still seen
        match = RECONFIGURE_COUNT.search(stats)
        return f"{boot} reconfigures={match.group(1) if match else 0}"

    def job_output_paths(self, job_id: int) -> JobOutputPaths:
        """StdOut/StdErr from `scontrol show job` (text on every version), expanded:
        22.05 expands %j, %u and %x there but leaves %N."""
        text = self.run(["scontrol", "-o", "show", "job", str(int(job_id))])
        for record in parse_scontrol_records(text):
            if record.get("JobId") == str(job_id):
                return output_paths_from_record(record, job_id)
        raise BackendError(f"Invalid job id specified for job {job_id}", permanent=True)

    def read_job_file(self, user: str, path: str, max_bytes: int) -> FileTail:
        return read_tail_as(user, path, max_bytes, runner=self.file_runner)

    def configured_partitions(self) -> dict[str, tuple[str, ...]]:
        """Partition -> nodes as slurm.conf defines them.

        `scontrol update partitionname=... nodes=...` lasts only until the next
        `scontrol reconfigure` or slurmctld restart, when Slurm falls back to
        these; compare with partitions() to detect that drift and re-apply.
        """
        return parse_slurm_conf_partitions(self.slurm_conf_text())

    def checks_run_on_this_host(self) -> bool:
        """Whether slurm.conf puts every node at a loopback address, as the local
        minicluster does (deploy/minicluster/up: `NodeAddr=127.0.0.1`): only then is
        a check run on this host a check of the node (see ChecksRunOnThisHost). An
        unreadable slurm.conf, or one whose nodes sit in an include file, says no."""
        try:
            addresses = parse_slurm_conf_node_addresses(self.slurm_conf_text())
        except BackendError:
            return False
        return bool(addresses) and all(map(is_loopback, addresses))

    def slurm_conf_text(self) -> str:
        path = Path(self.slurm_conf or DEFAULT_SLURM_CONF)
        try:
            return path.read_text()
        except OSError as error:
            raise BackendError(f"cannot read {path}: {error}", permanent=True) from error

    # ------------------------------------------------------------ node actions

    def drain_node(self, node: str, reason: str) -> None:
        self.set_node_state(node, "drain", reason)

    def fail_node(self, node: str, reason: str) -> None:
        self.set_node_state(node, "fail", reason)

    def down_node(self, node: str, reason: str) -> None:
        self.set_node_state(node, "down", reason)

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        self.run(
            [
                "scontrol",
                "update",
                f"nodename={checked_node(node)}",
                f"state={state}",
                f"reason={checked_reason(reason)}",
            ]
        )

    def resume_node(self, node: str) -> None:
        try:
            self.run(["scontrol", "update", f"nodename={checked_node(node)}", "state=resume"])
        except BackendError as error:
            # Slurm refuses to resume a node that is neither drained nor down; for
            # an idempotent caller that node is already where it wanted it.
            if not error.message.startswith(RESUME_REFUSALS) or self.node_needs_resume(node):
                raise

    def node_needs_resume(self, node: str) -> bool:
        for info in self.nodes():
            if info.name == node:
                return info.state == "down" or bool(info.flags & {"drain", "fail"})
        return True

    def reboot_node(self, node: str, reason: str) -> None:
        self.run(
            [
                "scontrol",
                "reboot",
                "ASAP",
                "nextstate=resume",
                f"reason={checked_reason(reason)}",
                checked_node(node),
            ]
        )

    # ------------------------------------------------------------ maintenance holds

    def hold_for_checks(self, node: str) -> None:
        """A maintenance reservation on NODE alone, for Medbay's own account: the
        scheduler starts no job there until it is deleted. `ignore_jobs`, so that a node
        still finishing a job can be held too; two hours, so that even a hold nobody
        deletes ends by itself."""
        name = CHECK_HOLD_PREFIX + checked_node(node)
        try:
            self.run(
                [
                    "scontrol", "create", "reservation", f"reservationname={name}",
                    "flags=maint,ignore_jobs", f"nodes={checked_node(node)}",
                    "starttime=now", f"duration={CHECK_HOLD_MINUTES}", f"users={_own_user()}",
                ]
            )  # fmt: skip
        except BackendError as error:
            if "duplicate" not in error.message.lower():
                raise

    def release_checks_hold(self, node: str) -> None:
        name = CHECK_HOLD_PREFIX + checked_node(node)
        try:
            self.run(["scontrol", "delete", f"reservation={name}"])
        except BackendError as error:
            if "invalid" not in error.message.lower():  # already gone
                raise

    def checks_holds(self) -> list[str]:
        """The nodes Medbay's maintenance reservations hold now."""
        text = self.run(["scontrol", "show", "reservation", "--oneliner"])
        names = re.findall(r"ReservationName=(\S+)", text)
        return sorted(n[len(CHECK_HOLD_PREFIX) :] for n in names if n.startswith(CHECK_HOLD_PREFIX))

    def set_partition_nodes(self, partition: str, nodes: Sequence[str]) -> None:
        """Replaces the partition's members (until slurmctld restarts, see
        configured_partitions)."""
        members = ",".join(checked_node(node) for node in nodes)
        self.run(
            ["scontrol", "update", f"partitionname={checked_name(partition)}", f"nodes={members}"]
        )

    # ------------------------------------------------------------ job actions

    def signal_job(self, job_id: int, signal: str = "USR1", *, batch_only: bool = True) -> None:
        """`--batch` reaches only the batch shell (its trap runs, the job keeps
        going); `--full` also signals every step's tasks."""
        if not SAFE_SIGNAL.match(signal or ""):
            raise BackendError(f"invalid signal name {signal!r}", permanent=True)
        scope = "--batch" if batch_only else "--full"
        self.run(["scancel", f"--signal={signal}", scope, str(int(job_id))])

    def requeue_job(self, job_id: int, *, hold: bool = False) -> None:
        """The job returns to PENDING and is not eligible again until the old job
        credential expires (`AuthInfo=cred_expire`, default 120 s)."""
        self.run(["scontrol", "requeuehold" if hold else "requeue", str(int(job_id))])

    def cancel_job(self, job_id: int) -> None:
        self.run(["scancel", str(int(job_id))])

    def hold_job(self, job_id: int) -> None:
        self.run(["scontrol", "hold", str(int(job_id))])

    def release_job(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(int(job_id))])

    def start_now(self, job_id: int) -> None:
        """Makes a requeued job eligible at once.

        slurmd refuses a launch whose credential is not newer, to the second,
        than the one it revoked when the previous run was killed; a release
        that lands in that second kills the job ("Job credential revoked").
        So refuse until the job is PENDING with nothing left on its nodes and
        its requeue (Slurm resets the submit time then) is a whole second old.
        """
        job = self.job(job_id)
        if job.state != "PENDING" or job.nodes:
            raise BackendError(
                f"job {job_id} is {job.state}; start_now needs a pending job whose old "
                "allocation is gone",
                permanent=job.state not in {"COMPLETING", "REQUEUED", "RUNNING", "CONFIGURING"},
            )
        requeued_at = job.submit_time
        if requeued_at is not None and self.clock() < requeued_at + RELEASE_AFTER_REQUEUE:
            raise BackendError(
                f"job {job_id} was requeued at {requeued_at:%H:%M:%S}; start_now waits "
                f"{RELEASE_AFTER_REQUEUE.seconds} s so the old credential cannot match",
                permanent=False,
            )
        self.run(["scontrol", "update", f"jobid={int(job_id)}", "starttime=now"])

    def submit_job(self, submission: JobSubmission) -> int:
        """Submits the script as `submission.user`; returns the Slurm job id."""
        if not submission.script.strip():
            raise BackendError("the job script is empty", permanent=True)
        user = checked_user(submission.user)
        env_extra = checked_env(submission.extra_env)
        chdir = submission.workdir or home_of(user)
        if user == current_user():
            return self.submit_as_self(submission.script, chdir, env_extra)
        if os.geteuid() == 0:
            return self.submit_with_runuser(user, submission.script, chdir, env_extra)
        return self.submit_with_sudo(user, submission.script, chdir, env_extra)

    def submit_as_self(self, script: str, chdir: str, env_extra: dict[str, str]) -> int:
        args = ["sbatch", "--parsable", f"--chdir={chdir}"]
        result = self.runner(
            args, input_text=script, timeout=self.timeout, env=self.command_env(env_extra)
        )
        return job_id_from_sbatch(result)

    def submit_with_runuser(
        self, user: str, script: str, chdir: str, env_extra: dict[str, str]
    ) -> int:
        """As root: write the script into a private folder the user owns, then run
        sbatch as that user (runuser keeps SLURM_CONF and the extra variables)."""
        entry = pwd.getpwnam(user)
        folder = tempfile.mkdtemp(prefix="medbay-sbatch-")
        try:
            os.chown(folder, entry.pw_uid, entry.pw_gid)
            script_path = Path(folder) / "job.sh"
            descriptor = os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(script)
            os.chown(script_path, entry.pw_uid, entry.pw_gid)
            args = ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={chdir}"]
            result = self.runner(
                [*args, str(script_path)],
                input_text=None,
                timeout=self.timeout,
                env=self.command_env(env_extra),
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return job_id_from_sbatch(result)

    def submit_with_sudo(
        self, user: str, script: str, chdir: str, env_extra: dict[str, str]
    ) -> int:
        """Not root: sudo resets the environment, so pass SLURM_CONF and the
        extra variables explicitly through env(1); the script goes on stdin."""
        assignments = [f"{key}={value}" for key, value in env_extra.items()]
        if self.slurm_conf:
            assignments.insert(0, f"SLURM_CONF={self.slurm_conf}")
        args = ["sudo", "-n", "-u", user, "--", "env", *assignments]
        args += ["sbatch", "--parsable", f"--chdir={chdir}"]
        result = self.runner(args, input_text=script, timeout=self.timeout, env=self.command_env())
        return job_id_from_sbatch(result)


# ---------------------------------------------------------------- argument checks


def raise_json_errors(args: Sequence[str], payload: Any) -> None:
    """Raise the errors a `--json` command reports in its body instead of its exit status.

    22.05's `squeue --json` and `sinfo --json` exit 0 with `"errors": [...]` and an
    empty list when slurmctld cannot be reached; read as data, that empty list said
    every job had finished and every node was gone (found by the chaos suite,
    tests/chaos/test_slurmctld_restart.py). A failed read is worth
    retrying, so the error is transient; the engine asks a human after repeats.
    """
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if not errors:
        return
    details = [
        str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e)
        for e in errors
    ]
    message = f"{args[0]} reported: {'; '.join(dict.fromkeys(details))}"
    raise BackendError(f"{message} (is slurmctld reachable?)", permanent=False)


def raise_if_no_controller_answered(args: Sequence[str], payload: Any) -> None:
    """24.11's and 26.05's `scontrol show job --json` exit 0 when slurmctld is down,
    after ~10 s, with no jobs, no errors and `last_update` 0 (measured on both; the
    same call on a live controller always carries its last update time). Read as
    data, that said every job had gone."""
    if not isinstance(payload, dict) or payload.get("jobs") or "last_update" not in payload:
        return
    if not plain_number(payload.get("last_update")):
        raise BackendError(
            f"Unable to contact slurm controller ({' '.join(args)} answered with no jobs "
            "and no update time)",
            permanent=False,
        )


def checked_reason(reason: str) -> str:
    """Slurm refuses drain/down/fail without a reason; say so before asking it."""
    text = " ".join((reason or "").split())
    if not text:
        raise BackendError(
            "a reason is required to drain, fail, down or reboot a node", permanent=True
        )
    return text


def checked_node(node: str) -> str:
    return checked_name(node)


def checked_name(name: str) -> str:
    """Node and partition names go into `key=value` arguments; keep them plain."""
    if not SAFE_NAME.match(name or ""):
        raise BackendError(f"invalid Slurm name {name!r}", permanent=True)
    return name


def checked_user(user: str) -> str:
    if not SAFE_USER.match(user or ""):
        raise BackendError(f"invalid user name {user!r}", permanent=True)
    try:
        pwd.getpwnam(user)
    except KeyError as error:
        raise BackendError(f"no such user {user!r} on this machine", permanent=True) from error
    return user


def checked_env(extra_env: Mapping[str, str]) -> dict[str, str]:
    for key in extra_env:
        if not SAFE_ENV_KEY.match(key):
            raise BackendError(f"invalid environment variable name {key!r}", permanent=True)
    return {key: str(value) for key, value in extra_env.items()}


def current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def home_of(user: str) -> str:
    return pwd.getpwnam(user).pw_dir or "/"


def job_id_from_sbatch(result: CommandResult) -> int:
    """`sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`."""
    if result.returncode != 0:
        raise error_from_result(result)
    first_line = result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""
    match = re.match(r"^(\d+)", first_line)
    if not match:
        # Not retryable: the job may exist, and a retry would submit it twice.
        raise BackendError(f"sbatch printed no job id: {result.stdout!r}", permanent=True)
    return int(match.group(1))


def _own_user() -> str:
    """The Unix account Medbay runs as: the only user its maintenance holds admit."""
    return pwd.getpwuid(os.getuid()).pw_name
