import json
import stat
import threading

import pytest

from agent import cli
from agent.checks import CheckContext
from agent.events import XidEventBuilder
from agent.follow import FileFollower
from agent.loop import AgentLoop
from agent.parsers.kmsg import KmsgParser
from agent.schema import FIELD_NAMES
from agent.sender import Sender
from agent.spool import Spool

from .test_agent_sender import FakePortal

FORMATS = ["kmsg_syslog.log", "kmsg_journalctl.log", "kmsg_journalctl_iso.log", "kmsg_dmesg.log",
           "kmsg_dmesg_T.log", "kmsg_devkmsg.log"]  # fmt: skip


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("name", FORMATS)
def test_parse_prints_one_json_event_per_xid_in_every_format(capsys, fixtures, name):
    code, lines = run_cli(
        capsys, "parse", "--kmsg", str(fixtures / name), "--node", "gpu-07",
        "--boot-time", "2026-11-29T09:44:20+00:00",
    )  # fmt: skip
    events = [json.loads(line) for line in lines]
    assert code == 0
    assert [e["xid"] for e in events] == [48, 63, 154, 13, 43, 94, 79, 79]
    first = events[0]
    assert tuple(first) == FIELD_NAMES
    assert (first["kind"], first["pci"], first["pid"], first["process"]) == (
        "xid", "0000:55:00", 2187001, "python"
    )  # fmt: skip
    assert first["observed_at"].startswith("2026-11-29T10:01:00")
    assert first["data"]["gpu_uuid"] == "GPU-8c3f2e40-5d6f-4071-acbd-2e3f4a5b6c72"
    assert first["data"]["rung"] == "reset_gpu"
    assert events[2]["data"]["recovery_to"] == 4
    assert events[5]["gpu_instance"] == 5
    assert len({e["id"] for e in events}) == len(events)


def test_parse_gives_the_same_ids_every_time(capsys, fixtures):
    path = str(fixtures / "kmsg_syslog.log")
    _, first = run_cli(capsys, "parse", "--kmsg", path, "--node", "gpu-07")
    _, second = run_cli(capsys, "parse", "--kmsg", path, "--node", "gpu-07")
    assert [json.loads(x)["id"] for x in first] == [json.loads(x)["id"] for x in second]


def test_identical_lines_get_different_ids():
    line = "Nov 29 10:01:02 gpu-07 kernel: NVRM: Xid (PCI:0000:38:00): 13, pid=1, name=p, Ch 1"
    parser = KmsgParser()
    events = XidEventBuilder("gpu-07").build(parser.feed(line) + parser.feed(line))
    assert events[0]["id"] != events[1]["id"]


def healthy_config(tmp_path, **extra):
    config = {"checks": ["force_drain", "disk_free"], "disk": {"paths": [str(tmp_path)]}, **extra}
    path = tmp_path / "medbay.json"
    path.write_text(json.dumps(config))
    return path


def test_check_exits_zero_when_healthy(capsys, tmp_path):
    code, lines = run_cli(capsys, "check", "--once", "--config", str(healthy_config(tmp_path)))
    # A skipped check is never reported as passed: it is named, with its reason.
    assert (code, lines) == (
        0,
        [
            "healthy: 1 pass, 0 warn, 1 skip "
            "(skipped, with the reason: force_drain: no fail_file configured)"
        ],
    )


def test_the_deep_checks_run_the_stress_checks_and_skip_missing_tools_naming_them(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, dcgmi or nccl-tests here
    monkeypatch.setattr("agent.checks.base.SYSTEM_BIN_DIRS", ())
    config = tmp_path / "deep.json"
    config.write_text(json.dumps({"disk": {"paths": [str(tmp_path)]}, "expected_gpus": 0}))
    code, lines = run_cli(capsys, "check", "--once", "--deep", "--config", str(config))
    assert code == 0
    assert "memory_stress" not in lines[0] and "cpu_stress" not in lines[0]  # both ran
    for skipped in ("nvlink: nvidia-smi not found", "dcgm_diag: dcgmi not found"):
        assert skipped in lines[0]


def test_check_skips_gpu_checks_when_the_tools_are_missing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("agent.checks.base.SYSTEM_BIN_DIRS", ())
    config = tmp_path / "medbay.toml"
    config.write_text('checks = ["nvidia_smi_responds", "ecc_remap", "dcgm_diag"]\n')
    code, lines = run_cli(capsys, "check", "--once", "--config", str(config))
    assert (code, lines) == (
        0,
        [
            "healthy: 0 pass, 0 warn, 3 skip (skipped, with the reason: nvidia_smi_responds: "
            "nvidia-smi not found; ecc_remap: nvidia-smi not found; dcgm_diag: dcgmi not found)"
        ],
    )


def test_check_exits_one_with_a_one_line_reason(capsys, tmp_path):
    fail_file = tmp_path / "force-drain"
    fail_file.write_text("replace PSU\n")
    config = healthy_config(tmp_path)
    code, lines = run_cli(capsys, "check", "--once", "--config", str(config), "--fail-file",
                          str(fail_file))  # fmt: skip
    assert (code, lines) == (1, [f"force_drain: force-drain file {fail_file} present: replace PSU"])


def fake_scontrol(tmp_path):
    log = tmp_path / "scontrol.log"
    script = tmp_path / "scontrol"
    script.write_text(f'#!/bin/sh\nfor arg in "$@"; do echo "$arg" >> {log}; done\n'
                      f'echo "SLURM_CONF=$SLURM_CONF" >> {log}\n')  # fmt: skip
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def test_check_drain_calls_scontrol_with_the_reason(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-07")
    script, log = fake_scontrol(tmp_path)
    fail_file = tmp_path / "force-drain"
    fail_file.touch()
    code, lines = run_cli(
        capsys, "check", "--once", "--drain", "--config", str(healthy_config(tmp_path)),
        "--fail-file", str(fail_file), "--scontrol", str(script),
        "--slurm-conf", "/etc/slurm/slurm.conf",
    )  # fmt: skip
    assert code == 1
    assert log.read_text().splitlines() == [
        "update",
        "nodename=gpu-07",
        "state=drain",
        f"reason=medbay: force_drain: force-drain file {fail_file} present",
        "SLURM_CONF=/etc/slurm/slurm.conf",
    ]


def test_check_does_not_drain_a_healthy_node(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-07")
    script, log = fake_scontrol(tmp_path)
    code, _ = run_cli(capsys, "check", "--once", "--drain", "--scontrol", str(script),
                      "--config", str(healthy_config(tmp_path)))  # fmt: skip
    assert code == 0
    assert not log.exists()


def test_check_reports_a_bad_config_file(capsys, tmp_path):
    bad = tmp_path / "medbay.json"
    bad.write_text("{not json")
    code, lines = run_cli(capsys, "check", "--once", "--config", str(bad))
    assert code == 2
    assert lines[0].startswith(f"config error: invalid config {bad}")


def agent_loop(tmp_path, portal_url: str, *, timeout_s: float | None = None, **options):
    """gpu-07's agent loop following an empty kern.log in TMP_PATH, sending to PORTAL_URL."""
    log = tmp_path / "kern.log"
    log.write_text("")
    spool = Spool(tmp_path / "spool")
    sending = {} if timeout_s is None else {"timeout_s": timeout_s}
    loop = AgentLoop(
        follower=FileFollower(log),
        parser=KmsgParser(),
        builder=XidEventBuilder("gpu-07"),
        spool=spool,
        sender=Sender(spool, portal_url, "t", "gpu-07", **sending),
        **options,
    )
    return log, loop


def test_the_run_loop_spools_xids_and_checks_and_delivers_them(tmp_path):
    portal = FakePortal()
    portal.start()
    try:
        log, loop = agent_loop(
            tmp_path,
            portal.url,
            timeout_s=2,
            check_context=CheckContext(config={"fail_file": str(tmp_path / "absent")}),
            check_interval_s=60,
            check_names=["force_drain"],
        )
        with open(log, "a") as handle:
            handle.write(
                "Nov 29 10:01:02 gpu-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
            )
        loop.step(now=1000.0)
        loop.step(now=1001.0)  # checks are not due again yet
        kinds = [portal.accepted[i]["kind"] for i in portal.received]
        assert kinds == ["xid", "check"]
        check = portal.accepted[portal.received[1]]
        assert (check["check"], check["status"]) == ("force_drain", "pass")
    finally:
        portal.stop()


def test_run_stops_cleanly_on_request(tmp_path):
    _, loop = agent_loop(tmp_path, "http://127.0.0.1:9")
    stop = threading.Event()
    stop.set()
    loop.run_forever(stop)


def test_the_run_command_follows_a_file_and_stops_on_sigterm(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    portal = FakePortal()
    portal.start()
    log = tmp_path / "kern.log"
    log.write_text("")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", "--portal", portal.url,
         "--token-file", str(token), "--kmsg", str(log), "--node", "gpu-07",
         "--spool", str(tmp_path / "spool"), "--from-start"],
        cwd=os.getcwd(),
    )  # fmt: skip
    try:
        with open(log, "a") as handle:
            handle.write("[ 5.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
        deadline = time.monotonic() + 10
        while not portal.received and time.monotonic() < deadline:
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
        (event,) = portal.accepted.values()
        assert (event["xid"], event["pci"]) == (79, "0000:3b:00")
        assert portal.requests[0][1] == "Bearer s3cret"
    finally:
        if agent.poll() is None:
            agent.kill()
        portal.stop()


def test_the_agent_runs_its_deep_checks_once_per_maintenance_hold(tmp_path):
    from pathlib import Path

    from agent.checks import CommandOutput

    held = {"start": "2026-12-03T09:15:00"}

    def commands(argv, timeout_s, env=None):
        if Path(argv[0]).name == "scontrol" and held["start"]:
            return CommandOutput(
                0, f"ReservationName=medbay-check-gpu-07 StartTime={held['start']} Nodes=gpu-07\n"
            )
        return CommandOutput(1, "", "Reservation medbay-check-gpu-07 not found")

    portal = FakePortal()
    portal.start()
    try:
        context = CheckContext(
            run=commands,
            config={"node": "gpu-07", "fail_file": str(tmp_path / "absent"),
                    "memory_stress": {"mib": 4}, "cpu_stress": {"seconds": 0.05, "workers": 1}},
            which=lambda name: f"/usr/bin/{name}" if name == "scontrol" else None,
        )  # fmt: skip
        _, loop = agent_loop(
            tmp_path, portal.url, timeout_s=2, check_context=context,
            check_interval_s=60, check_names=["force_drain"],
        )  # fmt: skip
        loop.step(now=1000.0)
        loop.step(now=1061.0)  # the same hold: the usual checks again
        held["start"] = None
        loop.step(now=1122.0)
        names = [portal.accepted[i]["check"] for i in portal.received]
        assert names.count("deep_checks") == 1
        assert "memory_stress" in names and "nccl_allreduce" in names
        assert names[-1] == "force_drain" and names.count("force_drain") == 3
        deep = next(portal.accepted[i] for i in portal.received
                    if portal.accepted[i]["check"] == "deep_checks")  # fmt: skip
        assert deep["status"] == "pass"
        assert (
            "skipped, with the reason: nvidia_smi_responds: nvidia-smi not found" in deep["message"]
        )
    finally:
        portal.stop()
