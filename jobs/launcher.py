"""medbay-launch: the auto-resume launcher that runs inside a Medbay batch script.

Runs on compute nodes, so it imports no Django and nothing beyond the standard
library but clusters/backends/slurm_syntax.py, which reads hostlists as the
Slurm parsers do.

    medbay-launch [--torchrun] [--nproc-per-node N] -- COMMAND...
        On the batch host: reads the job's nodes from scontrol, sets MASTER_ADDR,
        MASTER_PORT, NNODES and MEDBAY_RESTART_COUNT, and runs one srun step that starts
        this file with --inner on every node.
    medbay-launch --inner [--torchrun] [--nproc-per-node N] -- COMMAND...
        On each node (inside srun): sets NODE_RANK and runs torchrun or COMMAND.
    medbay-launch progress --step N [--checkpoint]
        Best-effort progress report to the portal; always exits 0.

Both levels forward SIGUSR1 and SIGTERM to their child so the trainer can checkpoint.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from clusters.backends.slurm_syntax import expand_hostlist

DEFAULT_MASTER_PORT = 29500
SCONTROL_TIMEOUT_S = 15
PROGRESS_TIMEOUT_S = 3.0
FORWARDED_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

# scontrol prints Key=Value tokens separated by spaces (one line with -o, wrapped without).
# The leading-space anchor keeps ReqNodeList=/ExcNodeList= from matching NodeList=.
SCONTROL_FIELD_RE = r"(?:^|\s){key}=(\S*)"


@dataclass(frozen=True)
class JobInfo:
    """What the launcher needs from `scontrol show job`."""

    node_list: str
    batch_host: str | None
    restarts: int | None


def log(message: str) -> None:
    print(f"medbay-launch: {message}", file=sys.stderr, flush=True)


def parse_scontrol_job(text: str) -> JobInfo | None:
    """Parse the first job record of `scontrol [-o] show job ID`; None if it has no nodes."""
    record = text.split("\n\n")[0]
    node_list = _scontrol_field(record, "NodeList")
    if not node_list or node_list == "(null)":
        return None
    batch_host = _scontrol_field(record, "BatchHost")
    restarts = _scontrol_field(record, "Restarts")
    return JobInfo(
        node_list=node_list,
        batch_host=batch_host or None,
        restarts=int(restarts) if restarts and restarts.isdigit() else None,
    )


def _scontrol_field(record: str, key: str) -> str | None:
    match = re.search(SCONTROL_FIELD_RE.format(key=re.escape(key)), record)
    return match.group(1) if match else None


def read_job_info(job_id: str, env: dict[str, str], run=subprocess.run) -> JobInfo | None:
    """Ask scontrol for the job's current nodes, falling back to SLURM_JOB_NODELIST."""
    # After a requeue the job can land on other nodes; scontrol is the controller's view now.
    try:
        result = run(
            ["scontrol", "-o", "show", "job", job_id],
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_S,
            env=env,
        )
    except (OSError, subprocess.SubprocessError) as error:
        log(f"scontrol failed ({error}); using SLURM_JOB_NODELIST")
    else:
        info = parse_scontrol_job(result.stdout) if result.returncode == 0 else None
        if info is not None:
            return info
        log(f"scontrol gave no node list (exit {result.returncode}); using SLURM_JOB_NODELIST")
    node_list = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not node_list:
        return None
    return JobInfo(node_list=node_list, batch_host=None, restarts=None)


def master_port(job_id: str | None) -> int:
    # Two jobs sharing a node must not both bind 29500; the job id spreads them out.
    if job_id and job_id.isdigit():
        return 20000 + int(job_id) % 20000
    return DEFAULT_MASTER_PORT


def restart_count(env: dict[str, str]) -> int:
    value = env.get("SLURM_RESTART_COUNT", "")
    # Slurm leaves SLURM_RESTART_COUNT unset on the first attempt.
    return int(value) if value.isdigit() else 0


def launch_env(env: dict[str, str], job_id: str, info: JobInfo) -> dict[str, str]:
    """The environment every node's launcher and trainer inherit through srun."""
    nodes = expand_hostlist(info.node_list)
    return {
        **env,
        "MASTER_ADDR": nodes[0],
        "MASTER_PORT": str(master_port(job_id)),
        "NNODES": str(len(nodes)),
        "MEDBAY_NODELIST": info.node_list,
        "MEDBAY_BATCH_HOST": info.batch_host or nodes[0],
        "MEDBAY_RESTART_COUNT": str(restart_count(env)),
    }


def srun_command(
    command: list[str], torchrun: bool, nproc: int, nnodes: int, env: dict[str, str]
) -> list[str]:
    """The one srun step: this launcher once per node, in --inner mode."""
    argv = [
        "srun",
        "--kill-on-bad-exit=1",
        f"--nodes={nnodes}",
        f"--ntasks={nnodes}",
        "--ntasks-per-node=1",
    ]
    # Since Slurm 22.05 srun no longer inherits the batch job's --cpus-per-task.
    if env.get("SLURM_CPUS_PER_TASK", "").isdigit():
        argv.append(f"--cpus-per-task={env['SLURM_CPUS_PER_TASK']}")
    inner = [sys.executable, os.path.abspath(__file__), "--inner"]
    if torchrun:
        inner.append("--torchrun")
    return [*argv, *inner, "--nproc-per-node", str(nproc), "--", *command]


def inner_command(command: list[str], torchrun: bool, nproc: int, env: dict[str, str]) -> list[str]:
    """What one node runs: torchrun with a static rendezvous, or the command itself."""
    if not torchrun:
        return list(command)
    return [
        "torchrun",
        "--nnodes",
        env.get("NNODES", "1"),
        "--node_rank",
        env.get("NODE_RANK", "0"),
        "--master_addr",
        env.get("MASTER_ADDR", "127.0.0.1"),
        "--master_port",
        env.get("MASTER_PORT", str(DEFAULT_MASTER_PORT)),
        "--nproc_per_node",
        str(nproc),
        *command,
    ]


def run_forwarding(argv: list[str], env: dict[str, str], torchrun: bool = False) -> int:
    """Run argv in its own process group, forward USR1/TERM to it, return its exit status."""
    child: subprocess.Popen | None = None

    def forward(signum, _frame):
        if child is not None:
            forward_signal(child.pid, signum, torchrun)

    # Handlers go in before the child starts, so an early USR1 cannot kill the launcher.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        child = subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            # Ignoring survives exec: torchrun would otherwise die of USR1 (it has no handler)
            # and orphan its workers; trainers that install a handler still get the signal.
            preexec_fn=_ignore_usr1 if torchrun else None,
        )
        returncode = child.wait()
    except FileNotFoundError:
        log(f"command not found: {argv[0]}")
        return 127
    except PermissionError:
        log(f"command not executable: {argv[0]}")
        return 126
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # A child killed by signal N exits 128 + N, as a shell would report it.
    return returncode if returncode >= 0 else 128 - returncode


def _ignore_usr1() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def forward_signal(pid: int, signum: int, torchrun: bool) -> None:
    """Send signum to the child's process group and, for USR1 under torchrun, its workers'."""
    groups = [pid]
    if torchrun and signum == signal.SIGUSR1:
        # torchrun starts each worker in a new session, out of reach of its own group.
        groups += [_group_of(worker) for worker in child_pids(pid)]
    for group in dict.fromkeys(g for g in groups if g is not None):
        try:
            os.killpg(group, signum)
        except (ProcessLookupError, PermissionError):
            continue


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def child_pids(pid: int) -> list[int]:
    """Direct children of pid, from /proc."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces; the ppid follows it.
        after_name = fields[fields.rfind(")") + 2 :].split()
        if len(after_name) > 1 and after_name[1] == str(pid):
            children.append(int(entry))
    return children


def report_progress(step: int, checkpoint_saved: bool = False, env=None) -> bool:
    """Post the trainer's step to the portal; True if accepted. Never raises."""
    env = os.environ if env is None else env
    url = progress_url(env)
    token = env.get("MEDBAY_JOB_TOKEN")
    if url is None or not token:
        return False
    body = {
        "step": int(step),
        "checkpoint_saved": bool(checkpoint_saved),
        "restart_count": restart_count(env),
    }
    request = urllib.request.Request(  # noqa: S310 - progress_url only returns http(s) URLs
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    # A portal that is down or slow must never stall or fail the training job.
    try:
        with urllib.request.urlopen(request, timeout=PROGRESS_TIMEOUT_S) as response:  # noqa: S310
            return 200 <= response.status < 300
    except (OSError, ValueError, http.client.HTTPException) as error:
        # In the job's error file: the researcher (and an admin) can see why the job page
        # shows no progress.
        log(f"progress report for step {step} not accepted: {error}{_detail(error)}")
        return False


def _detail(error: Exception) -> str:
    """The portal's own words for a refused report (`{"detail": ...}`), if it gave any."""
    if not isinstance(error, urllib.error.HTTPError):
        return ""
    try:
        detail = json.loads(error.read(2000) or b"{}").get("detail")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" ({detail})" if isinstance(detail, str) and detail else ""


def progress_url(env) -> str | None:
    base = env.get("MEDBAY_PORTAL_URL", "")
    job_id = env.get("SLURM_JOB_ID", "")
    # The scheme check keeps urllib from reading file:// or other local URLs.
    if not base.startswith(("http://", "https://")) or not job_id:
        return None
    return f"{base.rstrip('/')}/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}/progress/"


def parse_launch_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="medbay-launch", usage="%(prog)s [--torchrun] [--nproc-per-node N] -- COMMAND..."
    )
    parser.add_argument("--torchrun", action="store_true", help="run COMMAND under torchrun")
    parser.add_argument("--nproc-per-node", type=int, default=None, help="processes per node")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    if "--" not in argv:
        parser.error("put the command after --")
    split = argv.index("--")
    options, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        parser.error("no command after --")
    if options.nproc_per_node is not None and options.nproc_per_node < 1:
        parser.error("--nproc-per-node must be at least 1")
    return options, command


def default_nproc(env: dict[str, str]) -> int:
    gpus = env.get("SLURM_GPUS_ON_NODE", "")
    return int(gpus) if gpus.isdigit() and int(gpus) > 0 else 1


def launch(options, command, env, run=subprocess.run, spawn=run_forwarding) -> int:
    """Batch-host side: find the nodes, then run one srun step across all of them."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        log("SLURM_JOB_ID is not set; run me inside a Slurm batch job")
        return 2
    info = read_job_info(job_id, env, run)
    if info is None:
        log("could not find the job's nodes from scontrol or SLURM_JOB_NODELIST")
        return 2
    child_env = launch_env(env, job_id, info)
    nproc = options.nproc_per_node or default_nproc(env)
    argv = srun_command(command, options.torchrun, nproc, int(child_env["NNODES"]), env)
    log(
        f"job {job_id} restart {child_env['MEDBAY_RESTART_COUNT']} on {info.node_list}, "
        f"master {child_env['MASTER_ADDR']}:{child_env['MASTER_PORT']}"
    )
    return spawn(argv, child_env)


def run_inner(options, command, env, spawn=run_forwarding) -> int:
    """Node side, one per node inside srun: set NODE_RANK and start the trainer."""
    child_env = {**env, "NODE_RANK": env.get("SLURM_NODEID", "0")}
    nproc = options.nproc_per_node or default_nproc(env)
    argv = inner_command(command, options.torchrun, nproc, child_env)
    return spawn(argv, child_env, torchrun=options.torchrun)


def progress_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="medbay-launch progress")
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--checkpoint", action="store_true", help="a checkpoint was just saved")
    options = parser.parse_args(argv)
    if not report_progress(options.step, options.checkpoint):
        log("progress report not delivered (ignored)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["progress"]:
        return progress_main(argv[1:])
    options, command = parse_launch_args(argv)
    env = dict(os.environ)
    if options.inner:
        return run_inner(options, command, env)
    return launch(options, command, env)


if __name__ == "__main__":
    sys.exit(main())
