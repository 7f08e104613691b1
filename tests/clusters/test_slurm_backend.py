"""SlurmBackend builds the right argument lists and maps Slurm's failures."""

import json
import os
import pwd
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clusters.backends.base import BackendError, ClusterBackend, JobSubmission
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import CommandResult, run_command

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


class FakeSlurm:
    """Answers commands from a table keyed by the argument list's start."""

    def __init__(self, answers=None, version="slurm-wlm 22.05.8"):
        self.calls = []
        self.answers = {("sinfo", "--version"): (0, version, "")}
        self.answers.update(answers or {})

    def __call__(self, args, *, input_text=None, timeout=None, env=None):
        self.calls.append({"args": list(args), "input": input_text, "timeout": timeout, "env": env})
        for prefix, (code, out, err) in self.answers.items():
            if tuple(args[: len(prefix)]) == prefix:
                return CommandResult(tuple(args), code, out, err)
        return CommandResult(tuple(args), 0, "", "")

    def commands(self):
        return [call["args"] for call in self.calls if call["args"] != ["sinfo", "--version"]]


def backend_with(fake, **options):
    return SlurmBackend("/etc/test/slurm.conf", runner=fake, **options)


def test_it_implements_the_cluster_backend_protocol():
    assert isinstance(SlurmBackend(runner=FakeSlurm()), ClusterBackend)
    assert SlurmBackend.name == "slurm"


def test_it_passes_slurm_conf_and_a_timeout_to_every_command():
    fake = FakeSlurm()
    backend_with(fake, timeout=3).drain_node("gpu-01", "xid 79")
    for call in fake.calls:
        assert call["env"]["SLURM_CONF"] == "/etc/test/slurm.conf"
        assert call["timeout"] == 3


def test_it_reads_slurm_conf_from_the_environment_by_default(monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/from/env/slurm.conf")
    assert SlurmBackend(runner=FakeSlurm()).slurm_conf == "/from/env/slurm.conf"


def test_it_detects_the_version_once():
    fake = FakeSlurm()
    backend = backend_with(fake)
    assert backend.slurm_version == (22, 5)
    assert backend.slurm_version == (22, 5)
    assert [c["args"] for c in fake.calls].count(["sinfo", "--version"]) == 1


def test_on_2205_it_reads_nodes_from_sinfo_json_and_jobs_from_squeue_json():
    fake = FakeSlurm(
        {
            ("sinfo", "--json"): (0, (FIXTURES / "22.05/sinfo.json").read_text(), ""),
            ("squeue", "--json"): (0, (FIXTURES / "22.05/squeue.json").read_text(), ""),
        }
    )
    backend = backend_with(fake)
    nodes = {node.name: node for node in backend.nodes()}
    jobs = {job.job_id: job for job in backend.jobs()}
    assert nodes["gpu-02"].flags == {"drain"}
    assert jobs[3].restart_count == 1
    assert fake.commands() == [["sinfo", "--json"], ["squeue", "--json"]]


def test_on_2411_it_uses_scontrol_json():
    fake = FakeSlurm(
        {
            ("scontrol", "show", "node", "--json"): (
                0,
                (FIXTURES / "24.11/scontrol_show_node.json").read_text(),
                "",
            ),
            ("scontrol", "show", "job", "--json"): (
                0,
                (FIXTURES / "24.11/scontrol_show_job.json").read_text(),
                "",
            ),
        },
        version="slurm 24.11.5",
    )
    backend = backend_with(fake)
    assert {node.name for node in backend.nodes()} == {"tx-01", "tx-02", "tx-03", "tx-04"}
    assert len(backend.jobs()) == 10
    assert fake.commands() == [
        ["scontrol", "show", "node", "--json"],
        ["scontrol", "show", "job", "--json"],
    ]


def test_in_text_mode_it_reads_scontrol_one_liners():
    fake = FakeSlurm(
        {
            ("scontrol", "-o", "-d", "show", "node"): (
                0,
                (FIXTURES / "22.05/scontrol_-o_show_node_all.txt").read_text(),
                "",
            ),
            ("scontrol", "-o", "-d", "show", "job"): (0, "No jobs in the system\n", ""),
        }
    )
    backend = backend_with(fake, output="text")
    assert len(backend.nodes()) == 6
    assert backend.jobs() == []


def test_partitions_are_read_as_text_because_json_hides_the_default():
    fake = FakeSlurm(
        {
            ("scontrol", "-o", "show", "partition"): (
                0,
                (FIXTURES / "24.11/scontrol_show_partition.txt").read_text(),
                "",
            )
        },
        version="slurm 24.11.5",
    )
    partitions = {p.name: p for p in backend_with(fake).partitions()}
    assert partitions["gpu"].default is True


def test_drain_fail_and_down_send_state_and_reason_as_single_arguments():
    fake = FakeSlurm()
    backend = backend_with(fake)
    backend.drain_node("gpu-02", "xid 79 GPU fallen off bus")
    backend.fail_node("gpu-03", "ecc")
    backend.down_node("gpu-04", "nvlink down")
    assert fake.commands() == [
        [
            "scontrol",
            "update",
            "nodename=gpu-02",
            "state=drain",
            "reason=xid 79 GPU fallen off bus",
        ],
        ["scontrol", "update", "nodename=gpu-03", "state=fail", "reason=ecc"],
        ["scontrol", "update", "nodename=gpu-04", "state=down", "reason=nvlink down"],
    ]


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_an_empty_reason_is_refused_before_asking_slurm(reason):
    fake = FakeSlurm()
    with pytest.raises(BackendError) as caught:
        backend_with(fake).drain_node("gpu-02", reason)
    assert caught.value.permanent is True
    assert fake.commands() == []


def test_node_names_that_could_smuggle_arguments_are_refused():
    fake = FakeSlurm()
    with pytest.raises(BackendError) as caught:
        backend_with(fake).drain_node("gpu-01 state=resume", "x")
    assert caught.value.permanent is True
    assert fake.commands() == []


def test_reboot_asks_for_asap_and_resume_afterwards():
    fake = FakeSlurm()
    backend_with(fake).reboot_node("gpu-05", "driver update")
    assert fake.commands() == [
        ["scontrol", "reboot", "ASAP", "nextstate=resume", "reason=driver update", "gpu-05"]
    ]


@pytest.mark.parametrize(
    "refusal",
    [
        "slurm_update error: Invalid node state specified",  # 22.05, 24.11
        "slurm_update error: Invalid node state transition",  # 26.05
    ],
)
def test_resuming_a_node_that_is_already_in_service_succeeds(refusal):
    sinfo = (FIXTURES / "22.05/sinfo.json").read_text()
    fake = FakeSlurm(
        {
            ("scontrol", "update"): (1, "", refusal),
            ("sinfo", "--json"): (0, sinfo, ""),
        }
    )
    backend_with(fake).resume_node("gpu-01")


def test_resuming_a_drained_node_that_slurm_refuses_raises():
    sinfo = (FIXTURES / "22.05/sinfo.json").read_text()
    fake = FakeSlurm(
        {
            ("scontrol", "update"): (1, "", "slurm_update error: Invalid node state specified"),
            ("sinfo", "--json"): (0, sinfo, ""),
        }
    )
    with pytest.raises(BackendError):
        backend_with(fake).resume_node("gpu-02")


def test_partition_membership_is_replaced_with_a_comma_list():
    fake = FakeSlurm()
    backend_with(fake).set_partition_nodes("train", ["gpu-01", "gpu-05"])
    assert fake.commands() == [["scontrol", "update", "partitionname=train", "nodes=gpu-01,gpu-05"]]


def test_job_actions_use_scancel_and_scontrol():
    fake = FakeSlurm()
    backend = backend_with(fake)
    backend.signal_job(7, "USR1")
    backend.signal_job(7, "TERM", batch_only=False)
    backend.requeue_job(7)
    backend.requeue_job(7, hold=True)
    backend.cancel_job(7)
    backend.hold_job(7)
    backend.release_job(7)
    assert fake.commands() == [
        ["scancel", "--signal=USR1", "--batch", "7"],
        ["scancel", "--signal=TERM", "--full", "7"],
        ["scontrol", "requeue", "7"],
        ["scontrol", "requeuehold", "7"],
        ["scancel", "7"],
        ["scontrol", "hold", "7"],
        ["scontrol", "release", "7"],
    ]


def test_start_now_waits_until_the_old_allocation_is_gone():
    completing = "JobId=5 JobName=x UserId=root(0) JobState=COMPLETING Reason=None NodeList=gpu-01"
    fake = FakeSlurm({("scontrol", "-o", "-d", "show", "job"): (0, completing, "")})
    with pytest.raises(BackendError) as caught:
        backend_with(fake).start_now(5)
    assert caught.value.permanent is False
    assert ["scontrol", "update", "jobid=5", "starttime=now"] not in fake.commands()


def test_start_now_makes_a_pending_job_eligible():
    pending = "JobId=5 JobName=x UserId=root(0) JobState=PENDING Reason=BeginTime NodeList="
    fake = FakeSlurm({("scontrol", "-o", "-d", "show", "job"): (0, pending, "")})
    backend_with(fake).start_now(5)
    assert fake.commands()[-1] == ["scontrol", "update", "jobid=5", "starttime=now"]


REQUEUED_AT_08_00_00 = (
    "JobId=5 JobName=x UserId=root(0) JobState=PENDING Reason=BeginTime "
    "SubmitTime=2026-11-29T08:00:00 NodeList="
)


@pytest.mark.parametrize(
    ("now", "released"),
    [("08:00:00.2", False), ("08:00:01.9", False), ("08:00:02.0", True), ("08:00:07", True)],
)
def test_start_now_waits_until_the_requeue_is_a_whole_second_old(now, released):
    fake = FakeSlurm({("scontrol", "-o", "-d", "show", "job"): (0, REQUEUED_AT_08_00_00, "")})
    clock = lambda: datetime.fromisoformat(f"2026-11-29T{now}+00:00")  # noqa: E731
    backend = backend_with(fake, local_tz=UTC, clock=clock)
    if released:
        backend.start_now(5)
    else:
        with pytest.raises(BackendError, match="was requeued at 08:00:00") as caught:
            backend.start_now(5)
        assert caught.value.permanent is False
    assert (["scontrol", "update", "jobid=5", "starttime=now"] in fake.commands()) is released


@pytest.mark.parametrize(
    "stderr",
    [
        "scontrol: error: Unable to contact slurm controller (connect failure)",
        "slurm_load_jobs error: Socket timed out on send/recv operation",
        "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
    ],
)
def test_controller_trouble_is_a_transient_error(stderr):
    fake = FakeSlurm({("scontrol",): (1, "", stderr)})
    with pytest.raises(BackendError) as caught:
        backend_with(fake).hold_job(3)
    assert caught.value.permanent is False


@pytest.mark.parametrize(
    ("stderr", "message"),
    [
        ("slurm_suspend error: Invalid job id specified", "Invalid job id specified"),
        ("slurm_update error: Invalid node name specified", "Invalid node name specified"),
        ("Job is pending execution for job 10", "Job is pending execution for job 10"),
        (
            "slurm_update error: Requested operation is presently disabled",
            "Requested operation is presently disabled",
        ),
    ],
)
def test_refusals_are_permanent_errors_with_slurms_message(stderr, message):
    fake = FakeSlurm({("scontrol",): (1, "", stderr)})
    with pytest.raises(BackendError) as caught:
        backend_with(fake).requeue_job(10)
    assert caught.value.permanent is True
    assert caught.value.message == message


def test_a_command_that_times_out_is_a_transient_error():
    with pytest.raises(BackendError) as caught:
        run_command(["sleep", "5"], timeout=0.2)
    assert caught.value.permanent is False
    assert "timed out" in caught.value.message


def test_a_missing_command_is_a_permanent_error():
    with pytest.raises(BackendError) as caught:
        run_command(["medbay-no-such-slurm-tool"])
    assert caught.value.permanent is True


def test_controller_up_reads_scontrol_ping():
    up = FakeSlurm({("scontrol", "ping"): (0, "Slurmctld(primary) at vm is UP\n", "")})
    down = FakeSlurm({("scontrol", "ping"): (1, "Slurmctld(primary) at vm is DOWN\n", "")})
    assert backend_with(up).controller_up() is True
    assert backend_with(down).controller_up() is False


def test_configured_partitions_read_slurm_conf(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "NodeName=gpu-01\nPartitionName=train Nodes=gpu-[01-04] Default=YES\n"
        "PartitionName=spare Nodes=gpu-05,gpu-06 # spares\n"
    )
    backend = SlurmBackend(str(conf), runner=FakeSlurm())
    assert backend.configured_partitions() == {
        "train": ("gpu-01", "gpu-02", "gpu-03", "gpu-04"),
        "spare": ("gpu-05", "gpu-06"),
    }


@pytest.mark.parametrize(
    ("nodes", "this_host"),
    [
        # deploy/minicluster/up: every node at 127.0.0.1, whatever its NodeHostname.
        (
            "NodeName=gpu-01 NodeHostname=vm NodeAddr=127.0.0.1\nNodeName=gpu-02 NodeAddr=::1\n",
            True,
        ),
        ("NodeName=DEFAULT NodeAddr=127.0.0.1\nNodeName=gpu-[01-02] NodeHostname=vm\n", True),
        ("NodeName=gpu-[01-02] NodeHostname=localhost\n", True),
        # A DEFAULT line's address applies to the nodes after it.
        (
            "NodeName=DEFAULT NodeAddr=10.0.0.9\nNodeName=gpu-[01-02] NodeHostname=localhost\n",
            False,
        ),
        ("NodeName=gpu-01 NodeAddr=127.0.0.1\nNodeName=gpu-02 NodeAddr=10.0.0.2\n", False),
        ("NodeName=gpu-[01-02]\n", False),  # resolved by name: other machines
        ("Include /etc/slurm/nodes.conf\n", False),  # nodes it cannot see
    ],
)
def test_checks_run_on_this_host_only_where_slurm_conf_puts_every_node_here(
    tmp_path, nodes, this_host
):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n" + nodes + "PartitionName=train Nodes=ALL\n")
    assert SlurmBackend(str(conf), runner=FakeSlurm()).checks_run_on_this_host() is this_host


def test_checks_do_not_run_on_this_host_when_slurm_conf_is_unreadable(tmp_path):
    missing = SlurmBackend(str(tmp_path / "absent.conf"), runner=FakeSlurm())
    assert missing.checks_run_on_this_host() is False


def test_submitting_as_oneself_pipes_the_script_to_sbatch():
    me = pwd.getpwuid(os.geteuid()).pw_name
    fake = FakeSlurm({("sbatch",): (0, "42\n", "")})
    job_id = backend_with(fake).submit_job(
        JobSubmission(
            script="#!/bin/bash\nhostname\n", user=me, workdir="/tmp", extra_env={"X": "1"}
        )
    )
    assert job_id == 42
    call = fake.calls[-1]
    assert call["args"] == ["sbatch", "--parsable", "--chdir=/tmp"]
    assert call["input"] == "#!/bin/bash\nhostname\n"
    assert call["env"]["X"] == "1"


def test_sbatch_output_with_a_cluster_name_still_gives_the_job_id():
    me = pwd.getpwuid(os.geteuid()).pw_name
    fake = FakeSlurm({("sbatch",): (0, "43;medbay\n", "")})
    assert backend_with(fake).submit_job(JobSubmission(script="#!/bin/sh\ntrue\n", user=me)) == 43


@pytest.mark.skipif(os.geteuid() != 0, reason="runuser needs root")
def test_as_root_it_submits_for_another_user_with_runuser_and_a_private_file(tmp_path):
    other = next(
        (entry for entry in pwd.getpwall() if entry.pw_uid not in (0,) and entry.pw_uid >= 1),
        None,
    )
    if other is None:
        pytest.skip("no non-root user on this machine")
    seen = {}

    def runner(args, *, input_text=None, timeout=None, env=None):
        script = Path(args[-1])
        seen["args"] = list(args)
        seen["owner"] = script.stat().st_uid
        seen["mode"] = script.stat().st_mode & 0o777
        seen["text"] = script.read_text()
        return CommandResult(tuple(args), 0, "77\n", "")

    backend = SlurmBackend("/etc/test/slurm.conf", runner=runner)
    job_id = backend.submit_job(JobSubmission(script="#!/bin/sh\nid\n", user=other.pw_name))
    assert job_id == 77
    assert seen["args"][:6] == ["runuser", "-u", other.pw_name, "--", "sbatch", "--parsable"]
    assert (seen["owner"], seen["mode"], seen["text"]) == (other.pw_uid, 0o600, "#!/bin/sh\nid\n")
    assert not Path(seen["args"][-1]).exists()


def test_unknown_users_and_bad_variable_names_are_refused():
    fake = FakeSlurm()
    backend = backend_with(fake)
    with pytest.raises(BackendError):
        backend.submit_job(JobSubmission(script="#!/bin/sh\n", user="no-such-user-medbay"))
    me = pwd.getpwuid(os.geteuid()).pw_name
    with pytest.raises(BackendError):
        backend.submit_job(JobSubmission(script="#!/bin/sh\n", user=me, extra_env={"A B": "1"}))
    assert fake.commands() == []


def test_invalid_json_is_a_permanent_error():
    fake = FakeSlurm({("sinfo", "--json"): (0, "not json", "")})
    with pytest.raises(BackendError) as caught:
        backend_with(fake).nodes()
    assert caught.value.permanent is True


def test_fixture_json_is_what_the_fake_serves():
    # Guards the fakes above: they must serve real captured output, not hand-made JSON.
    assert json.loads((FIXTURES / "22.05/sinfo.json").read_text())["nodes"]


@pytest.mark.parametrize(
    "printed", ["not json", '{"jobs": {"1": {}}}', '["jobs"]', '{"jobs": [{"job_id": 1}']
)
def test_a_job_list_that_is_not_slurms_json_is_a_permanent_error(printed):
    fake = FakeSlurm({("squeue", "--json"): (0, printed, "")})
    with pytest.raises(BackendError, match="squeue printed invalid JSON") as caught:
        backend_with(fake).jobs()
    assert caught.value.permanent is True


def test_errors_in_a_job_list_body_are_a_transient_error():
    printed = '{"errors": [{"error": "Unable to contact slurm controller"}], "jobs": []}'
    fake = FakeSlurm({("squeue", "--json"): (0, printed, "")})
    with pytest.raises(BackendError, match="Unable to contact slurm controller") as caught:
        backend_with(fake).jobs()
    assert caught.value.permanent is False


def test_each_poll_of_the_job_list_reports_slurms_current_state():
    document = json.loads((FIXTURES / "22.05/squeue.json").read_text())
    fake = FakeSlurm({("squeue", "--json"): (0, json.dumps(document), "")})
    backend = backend_with(fake)
    before = {job.job_id: job for job in backend.jobs()}
    record = next(raw for raw in document["jobs"] if before[raw["job_id"]].state == "RUNNING")
    record["job_state"], record["restart_cnt"] = "PENDING", record["restart_cnt"] + 1
    fake.answers[("squeue", "--json")] = (0, json.dumps(document), "")
    after = {job.job_id: job for job in backend.jobs()}
    assert after[record["job_id"]].state == "PENDING"
    assert after[record["job_id"]].restart_count == before[record["job_id"]].restart_count + 1
