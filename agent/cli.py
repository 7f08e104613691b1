"""`medbay-agent`: parse | check | run (see /work/shared/CONTRACT.md).

medbay-agent parse --kmsg FILE [--node N] [--boot-time ISO]
medbay-agent check --once [--config F] [--drain] [--scontrol PATH] [--slurm-conf PATH]
                   [--fail-file PATH]
medbay-agent run --portal URL --token-file F [--kmsg PATH] [--node NAME] [--spool DIR]
                 [--interval S] [--batch N] [--from-start] [--config F]
"""

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent import config as agent_config
from agent.checks import (
    ALL_CHECKS,
    DEEP_CHECKS,
    DEEP_DCGM_LEVEL,
    CheckContext,
    CheckStatus,
    run_checks,
    select_checks,
)
from agent.checks.base import CommandOutput
from agent.events import XidEventBuilder
from agent.follow import open_follower
from agent.loop import AgentLoop
from agent.parsers.kmsg import KmsgParser, TimeContext
from agent.schema import MAX_BATCH
from agent.sender import Sender
from agent.spool import Spool

# Slurm runs HealthCheckProgram with an empty PATH, so scontrol is called by absolute path.
DEFAULT_SCONTROL = "/usr/bin/scontrol"
DRAIN_REASON_MAX = 200
EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="medbay-agent %(levelname)s %(message)s")
    try:
        return args.handler(args)
    except agent_config.ConfigError as error:
        print(f"config error: {error}")
        return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medbay-agent", description="Medbay GPU node agent")
    commands = parser.add_subparsers(dest="command", required=True)

    parse = commands.add_parser("parse", help="print the events a kernel-log file would produce")
    parse.add_argument("--kmsg", required=True, help="log file (syslog, journalctl, dmesg, kmsg)")
    parse.add_argument("--node", default=None)
    parse.add_argument("--boot-time", default=None, help="ISO time of boot, for dmesg stamps")
    parse.set_defaults(handler=command_parse)

    check = commands.add_parser("check", help="run health checks once (HealthCheckProgram)")
    check.add_argument("--once", action="store_true", required=True)
    check.add_argument("--config", default=None, help="JSON or TOML config file")
    check.add_argument("--drain", action="store_true", help="drain this node on failure")
    check.add_argument("--scontrol", default=None, help=f"default {DEFAULT_SCONTROL}")
    check.add_argument("--slurm-conf", default=None)
    check.add_argument("--fail-file", default=None, help="fail (force drain) while it exists")
    check.add_argument("--checks", default=None, help="comma-separated check names")
    check.add_argument(
        "--deep",
        action="store_true",
        help="the deep checks before a node takes jobs again (DCGM diagnostics level 2)",
    )
    check.add_argument("--node", default=None)
    check.set_defaults(handler=command_check)

    run = commands.add_parser("run", help="follow the kernel log and send events to the portal")
    run.add_argument("--portal", required=True)
    run.add_argument("--token-file", required=True)
    run.add_argument("--kmsg", default="/dev/kmsg")
    run.add_argument("--node", default=None)
    run.add_argument("--spool", default="/var/spool/medbay-agent")
    run.add_argument("--interval", type=float, default=0.0, help="seconds between checks (0=off)")
    run.add_argument("--batch", type=int, default=MAX_BATCH)
    run.add_argument("--from-start", action="store_true")
    run.add_argument("--config", default=None)
    run.set_defaults(handler=command_run)
    return parser


def node_name(explicit: str | None, config: dict) -> str:
    env = os.environ
    return explicit or config.get("node") or env.get("SLURMD_NODENAME") or socket.gethostname()


def boot_time(proc_root: Path = Path("/proc")) -> datetime | None:
    """This machine's boot time, to date dmesg-style relative stamps."""
    try:
        uptime = float((proc_root / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return datetime.now(UTC) - timedelta(seconds=uptime)


def command_parse(args) -> int:
    booted = datetime.fromisoformat(args.boot_time) if args.boot_time else boot_time()
    parser = KmsgParser(TimeContext(boot_time=booted))
    builder = XidEventBuilder(node_name(args.node, {}))
    if args.kmsg == "-":
        _print_events(sys.stdin, parser, builder)
    else:
        with open(args.kmsg, encoding="utf-8", errors="replace") as source:
            _print_events(source, parser, builder)
    return EXIT_OK


def _print_events(lines, parser: KmsgParser, builder: XidEventBuilder) -> None:
    for line in lines:
        for event in builder.build(parser.feed(line)):
            print(json.dumps(event))


def command_check(args) -> int:
    config = agent_config.with_overrides(
        agent_config.load_config(args.config),
        fail_file=args.fail_file,
        scontrol=args.scontrol,
        slurm_conf=args.slurm_conf,
        node=args.node,
    )
    names = args.checks.split(",") if args.checks else config.get("checks")
    if args.deep:
        names = names or list(DEEP_CHECKS)
        dcgm = config.setdefault("dcgm", {})
        dcgm.setdefault("diag_level", DEEP_DCGM_LEVEL)
    unknown = [name for name in names or [] if name not in ALL_CHECKS]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)}")
        return EXIT_USAGE
    context = CheckContext(config=config)
    results = run_checks(select_checks(names), context)
    failure = next((result for result in results if result.status == CheckStatus.FAIL), None)
    if failure is None:
        counts = {status: sum(r.status == status for r in results) for status in CheckStatus}
        skips = "; ".join(f"{r.name}: {r.message}" for r in results if r.status == CheckStatus.SKIP)
        print(
            f"healthy: {counts['pass']} pass, {counts['warn']} warn, {counts['skip']} skip"
            + (f" (skipped, with the reason: {skips})" if skips else "")
        )
        return EXIT_OK
    reason = f"{failure.name}: {failure.message}"
    print(reason.replace("\n", " "))
    if args.drain:
        _drain(context, reason)
    return EXIT_UNHEALTHY


def _drain(context: CheckContext, reason: str) -> None:
    node = context.node_name()
    if not node:
        print("cannot drain: SLURMD_NODENAME is not set and no --node given", file=sys.stderr)
        return
    scontrol = context.section("tools").get("scontrol") or DEFAULT_SCONTROL
    drain_reason = f"medbay: {reason}"[:DRAIN_REASON_MAX]
    argv = [scontrol, "update", f"nodename={node}", "state=drain", f"reason={drain_reason}"]
    try:
        output: CommandOutput = context.run(argv, 30.0, context.tool_env())
    except (OSError, subprocess.TimeoutExpired) as error:
        print(f"drain failed: {error}", file=sys.stderr)
        return
    if output.returncode != 0:
        print(f"drain failed: {output.stderr.strip() or output.returncode}", file=sys.stderr)


def command_run(args) -> int:
    config = agent_config.load_config(args.config)
    try:
        token = Path(args.token_file).read_text().strip()
    except OSError as error:
        print(f"cannot read token file {args.token_file}: {error.strerror}")
        return EXIT_USAGE
    node = node_name(args.node, config)
    spool = Spool(args.spool)
    follower = open_follower(args.kmsg, from_start=args.from_start)
    loop = AgentLoop(
        follower=follower,
        parser=KmsgParser(TimeContext(boot_time=boot_time())),
        builder=XidEventBuilder(node),
        spool=spool,
        sender=Sender(spool, args.portal, token, node, batch_size=args.batch),
        check_context=CheckContext(config={**config, "node": node}),
        check_interval_s=args.interval,
        check_names=config.get("checks"),
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    logging.getLogger(__name__).info("following %s for node %s", args.kmsg, node)
    loop.run_forever(stop)
    follower.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
