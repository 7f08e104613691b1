"""Parsers read real Slurm 22.05 and 24.11 output (tests/fixtures/slurm)."""

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clusters.backends import slurm_parsers as parsers
from clusters.backends.base import NODE_BASE_STATES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def load(relative: str) -> dict:
    return json.loads(read(relative))


def by_name(items):
    return {item.name: item for item in items}


def by_id(jobs):
    return {job.job_id: job for job in jobs}


def utc(*parts):
    return datetime(*parts, tzinfo=UTC)


# ---------------------------------------------------------------- values


def test_hostlists_expand_ranges_lists_and_suffixes():
    assert parsers.expand_hostlist("gpu-[01-03,05]") == ("gpu-01", "gpu-02", "gpu-03", "gpu-05")
    assert parsers.expand_hostlist("node[1-2]-ib") == ("node1-ib", "node2-ib")
    assert parsers.expand_hostlist("gpu-01,tx-[02-03]") == ("gpu-01", "tx-02", "tx-03")
    assert parsers.expand_hostlist("rack[1-2]-n[1-2]") == (
        "rack1-n1",
        "rack1-n2",
        "rack2-n1",
        "rack2-n2",
    )


def test_empty_hostlists_mean_no_nodes():
    for empty in ("", "(null)", "None assigned", None):
        assert parsers.expand_hostlist(empty) == ()


def test_gres_strings_give_gpu_count_and_model():
    assert parsers.gpu_count("gpu:h100:8") == 8
    assert parsers.gpu_model("gpu:h100:8") == "h100"
    assert parsers.gpu_count("gpu:8") == 8
    assert parsers.gpu_model("gpu:8") == ""
    assert parsers.gpu_count("gpu:h100:8(S:0)") == 8
    assert parsers.gpu_count("gpu:h100:4(IDX:0-3)") == 4
    assert parsers.gpu_count("gpu:h100:0(IDX:N/A)") == 0
    assert parsers.gpu_count("gpu:a100:2(S:0),gpu:h100:4(S:1),nic:1") == 6
    assert parsers.gpu_count("gres:gpu:8") == 8
    assert parsers.gpu_count("gres/gpu:h100:4") == 4
    assert parsers.gpu_count("(null)") == 0


def test_tres_strings_give_gpus_only_when_listed():
    assert parsers.tres_gpus("cpu=8,mem=4000M,node=2,billing=8,gres/gpu=16") == 16
    assert parsers.tres_gpus("cpu=2,mem=1000M,node=2,billing=2") is None


def test_numbers_objects_and_sentinels_become_ints_or_none():
    assert parsers.plain_number({"set": True, "infinite": False, "number": 5}) == 5
    assert parsers.plain_number({"set": False, "infinite": False, "number": 0}) is None
    assert parsers.plain_number({"set": False, "infinite": True, "number": 0}) is None
    assert parsers.plain_number(4294967294) is None
    assert parsers.plain_number(7) == 7


def test_unset_epochs_are_none_and_set_ones_are_aware_utc():
    assert parsers.epoch_to_datetime(0) is None
    assert parsers.epoch_to_datetime(4294967294) is None
    assert parsers.epoch_to_datetime({"set": True, "infinite": False, "number": 0}) is None
    assert parsers.epoch_to_datetime(1795938837) == utc(2026, 11, 29, 7, 53, 57)


def test_durations_read_as_minutes():
    assert parsers.duration_minutes("01:00:00") == 60
    assert parsers.duration_minutes("00:10:00") == 10
    assert parsers.duration_minutes("365-00:00:00") == 525600
    assert parsers.duration_minutes("2-03") == 2 * 24 * 60 + 3 * 60
    assert parsers.duration_minutes("UNLIMITED") is None


def test_exit_codes_read_like_a_shell_from_every_shape():
    assert parsers.text_exit_code("3:0") == 3
    assert parsers.text_exit_code("0:15") == 143
    # 22.05 squeue --json prints the raw wait status.
    assert parsers.json_exit_code(768) == 3
    assert parsers.json_exit_code(15) == 143
    assert (
        parsers.json_exit_code(
            {
                "status": ["ERROR"],
                "return_code": {"set": True, "infinite": False, "number": 3},
                "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
            }
        )
        == 3
    )


def test_node_state_tokens_split_into_base_state_and_flags():
    assert parsers.split_node_state(["IDLE", "DRAIN"]) == ("idle", frozenset({"drain"}))
    assert parsers.split_node_state(["MIXED", "DRAIN"]) == ("mixed", frozenset({"drain"}))
    assert parsers.split_node_state(["DOWN", "NOT_RESPONDING"]) == (
        "down",
        frozenset({"not_responding"}),
    )
    assert parsers.split_node_state(["idle*"]) == ("idle", frozenset({"not_responding"}))
    assert parsers.split_node_state(["drng"]) == ("mixed", frozenset({"drain"}))
    assert parsers.split_node_state(["IDLE", "REBOOT_REQUESTED", "MAINTENANCE"]) == (
        "idle",
        frozenset({"reboot_requested", "maint"}),
    )
    assert parsers.split_node_state(["WEIRD"]) == ("unknown", frozenset({"weird"}))


# ---------------------------------------------------------------- 22.05 nodes


def test_2205_one_line_nodes_show_drained_gpu_02_with_reason_and_time():
    nodes = by_name(parsers.parse_scontrol_nodes(read("22.05/scontrol_-o_show_node_all.txt"), UTC))
    assert nodes["gpu-02"].state == "idle"
    assert nodes["gpu-02"].flags == {"drain"}
    assert nodes["gpu-02"].reason == "xid 79"
    assert nodes["gpu-02"].reason_set_at == utc(2026, 11, 29, 8, 17, 51)
    assert nodes["gpu-06"].state == "down"
    assert nodes["gpu-06"].reason == "nvlink down"
    assert nodes["gpu-04"].gpus_used == 4
    assert nodes["gpu-05"].partitions == ("spare",)
    assert (nodes["gpu-01"].gpus, nodes["gpu-01"].gpu_model, nodes["gpu-01"].cpus) == (8, "h100", 8)


def test_2205_multi_line_nodes_show_draining_failing_and_not_responding():
    text = read("22.05/scontrol_show_node_draining_fail_notresponding.txt")
    nodes = by_name(parsers.parse_scontrol_nodes(text, UTC))
    assert (nodes["gpu-03"].state, nodes["gpu-03"].flags) == ("mixed", {"drain"})
    assert nodes["gpu-03"].reason == "xid 48 dbe"
    assert nodes["gpu-03"].gpus_used == 8
    assert (nodes["gpu-05"].state, nodes["gpu-05"].flags) == ("idle", {"fail"})
    assert nodes["gpu-05"].reason == "ecc uncorrectable"
    assert (nodes["gpu-06"].state, nodes["gpu-06"].flags) == ("idle", {"not_responding"})
    assert nodes["gpu-06"].reason == ""


def test_2205_single_node_files_agree_with_the_full_listing():
    allocated = parsers.parse_scontrol_nodes(read("22.05/scontrol_show_node_gpu-01_allocated.txt"))
    drained = parsers.parse_scontrol_nodes(read("22.05/scontrol_show_node_gpu-02_drained.txt"))
    down = parsers.parse_scontrol_nodes(read("22.05/scontrol_show_node_gpu-06_down.txt"))
    assert [(node.name, node.state) for node in allocated + drained + down] == [
        ("gpu-01", "mixed"),
        ("gpu-02", "idle"),
        ("gpu-06", "down"),
    ]
    assert drained[0].flags == {"drain"}
    assert down[0].reason == "nvlink down"
    multi = by_name(parsers.parse_scontrol_nodes(read("22.05/scontrol_show_node_all.txt"), UTC))
    assert multi["gpu-02"].reason_set_at == utc(2026, 11, 29, 8, 17, 51)


def test_2205_sinfo_json_splits_lower_case_state_from_upper_case_flags():
    nodes = by_name(parsers.parse_nodes_json(load("22.05/sinfo_state_variety.json")))
    assert (nodes["gpu-02"].state, nodes["gpu-02"].flags, nodes["gpu-02"].reason) == (
        "down",
        frozenset(),
        "test",
    )
    assert (nodes["gpu-03"].state, nodes["gpu-03"].flags) == ("mixed", {"drain"})
    assert nodes["gpu-03"].gpus_used == 8
    assert (nodes["gpu-05"].state, nodes["gpu-05"].flags) == ("idle", {"fail"})
    assert (nodes["gpu-06"].state, nodes["gpu-06"].flags) == ("idle", {"not_responding"})


def test_2205_sinfo_json_carries_reason_time_as_epoch():
    nodes = by_name(parsers.parse_nodes_json(load("22.05/sinfo.json")))
    assert nodes["gpu-02"].flags == {"drain"}
    assert nodes["gpu-02"].reason == "xid 79"
    assert nodes["gpu-02"].reason_set_at == utc(2026, 11, 29, 8, 17, 51)
    assert nodes["gpu-01"].reason_set_at is None


def test_2205_slurmrestd_node_lists_match_sinfo_json():
    for name in ("rest_slurm_v0.0.37_nodes.json", "rest_slurm_v0.0.38_nodes.json"):
        nodes = by_name(parsers.parse_nodes_json(load(f"22.05/{name}")))
        assert nodes["gpu-02"].flags == {"drain"}
        assert nodes["gpu-06"].state == "down"


# ---------------------------------------------------------------- 22.05 jobs


def test_2205_requeued_two_node_job_shows_restart_and_new_nodes():
    jobs = by_id(parsers.parse_scontrol_jobs(read("22.05/scontrol_-o_show_job_all.txt"), UTC))
    job = jobs[3]
    assert job.state == "RUNNING"
    assert job.restart_count == 1
    assert job.nodes == ("gpu-01", "gpu-03")
    assert job.node_count == 2
    assert job.gpus == 16
    assert job.batch_host == "gpu-01"
    assert job.eligible_time == utc(2026, 11, 29, 8, 17, 57)
    assert job.time_limit_minutes is None
    assert job.exit_code is None


def test_2205_pending_job_keeps_its_long_reason_and_requested_gpus():
    jobs = by_id(parsers.parse_scontrol_jobs(read("22.05/scontrol_-o_show_job_all.txt"), UTC))
    job = jobs[7]
    assert job.state == "PENDING"
    assert job.reason.startswith("Nodes_required_for_job_are_DOWN,_DRAINED")
    assert job.nodes == ()
    assert job.node_count == 4
    assert job.gpus == 32
    assert job.start_time is None


def test_2205_failed_job_reports_exit_code_three():
    jobs = by_id(parsers.parse_scontrol_jobs(read("22.05/scontrol_-o_show_job_all.txt"), UTC))
    assert (jobs[6].state, jobs[6].reason, jobs[6].exit_code) == ("FAILED", "NonZeroExitCode", 3)
    assert jobs[4].time_limit_minutes == 60


def test_2205_multi_line_job_files_parse_like_one_liners():
    requeued = parsers.parse_scontrol_jobs(
        read("22.05/scontrol_show_job_3_running_2node_requeued.txt"), UTC
    )[0]
    assert (requeued.job_id, requeued.restart_count, requeued.gpus) == (3, 1, 16)
    partial = parsers.parse_scontrol_jobs(
        read("22.05/scontrol_show_job_4_running_partial_gpu.txt"), UTC
    )[0]
    assert (partial.job_id, partial.gpus, partial.nodes) == (4, 4, ("gpu-04",))
    pending = parsers.parse_scontrol_jobs(read("22.05/scontrol_show_job_7_pending.txt"), UTC)[0]
    assert (pending.job_id, pending.state, pending.gpus) == (7, "PENDING", 32)
    detailed = parsers.parse_scontrol_jobs(read("22.05/scontrol_-d_show_job_3.txt"), UTC)[0]
    assert (detailed.job_id, detailed.gpus, detailed.nodes) == (3, 16, ("gpu-01", "gpu-03"))


def test_job_gpus_come_from_job_gres_when_tres_lacks_them():
    # Without slurmdbd, Slurm leaves gres/gpu out of TRES; -d still prints JOB_GRES.
    text = (
        "JobId=9 JobName=wrap UserId=root(0) JobState=RUNNING Reason=None Requeue=1 "
        "Restarts=0 ExitCode=0:0 NodeList=gpu-[01-02] NumNodes=2 "
        "TRES=cpu=2,mem=1000M,node=2,billing=2 JOB_GRES=gpu:h100:16 "
        "Nodes=gpu-[01-02] CPU_IDs=0 Mem=500 GRES=gpu:h100:8(IDX:0-7) TresPerNode=gres:gpu:8"
    )
    assert parsers.parse_scontrol_jobs(text)[0].gpus == 16


def test_2205_squeue_json_decodes_raw_exit_status_and_gres_detail():
    jobs = by_id(parsers.parse_jobs_json(load("22.05/squeue.json")))
    assert jobs[6].state == "FAILED"
    assert jobs[6].exit_code == 3
    assert jobs[3].gpus == 16
    assert jobs[3].restart_count == 1
    assert jobs[3].nodes == ("gpu-01", "gpu-03")
    assert jobs[4].gpus == 4
    assert jobs[4].time_limit_minutes == 60
    assert jobs[7].state == "PENDING"
    assert jobs[7].reason == "Resources"
    assert jobs[7].gpus == 32
    assert jobs[3].submit_time == utc(2026, 11, 29, 8, 17, 51)


def test_2205_slurmrestd_jobs_match_squeue_json():
    jobs = by_id(parsers.parse_jobs_json(load("22.05/rest_slurm_v0.0.38_jobs.json")))
    assert jobs[3].restart_count == 1
    single = parsers.parse_jobs_json(load("22.05/rest_slurm_v0.0.38_job_3.json"))
    assert [job.job_id for job in single] == [3]


def test_2205_sacct_json_lists_the_requeued_attempt_separately():
    records = parsers.parse_sacct_json(load("22.05/sacct.json"))
    attempts = [job for job in records if job.job_id == 3]
    assert [job.state for job in attempts] == ["REQUEUED", "RUNNING"]
    assert attempts[0].nodes == ("gpu-01", "gpu-02")
    assert attempts[1].nodes == ("gpu-01", "gpu-03")
    assert attempts[0].gpus == 16
    pending = by_id(records)[7]
    assert (pending.state, pending.reason, pending.nodes) == ("PENDING", "ReqNodeNotAvail", ())
    assert pending.start_time is None
    rest = parsers.parse_sacct_json(load("22.05/rest_slurmdb_v0.0.38_job_3.json"))
    assert [job.state for job in rest] == ["REQUEUED", "RUNNING"]
    assert len(parsers.parse_sacct_json(load("22.05/rest_slurmdb_v0.0.38_jobs.json"))) == 7


def test_2205_partitions_read_default_limits_and_gpus():
    partitions = by_name(
        parsers.parse_scontrol_partitions(read("22.05/scontrol_show_partition.txt"))
    )
    assert partitions["gpu"].default is True
    assert partitions["gpu"].nodes == ("gpu-01", "gpu-02", "gpu-03", "gpu-04")
    assert partitions["gpu"].total_gpus == 32
    assert partitions["gpu"].max_time_minutes is None
    assert partitions["spare"].nodes == ("gpu-05", "gpu-06", "gpu-09")
    assert partitions["dyn"].nodes == ()
    rest = by_name(parsers.parse_partitions_json(load("22.05/rest_slurm_v0.0.38_partitions.json")))
    assert rest["gpu"].default is True
    assert rest["gpu"].max_nodes is None
    assert rest["gpu"].nodes == partitions["gpu"].nodes


# ---------------------------------------------------------------- 24.11 nodes


def test_2411_scontrol_json_nodes_use_state_arrays_and_epoch_objects():
    nodes = by_name(parsers.parse_nodes_json(load("24.11/scontrol_show_node.json")))
    assert (nodes["tx-01"].state, nodes["tx-01"].flags) == ("allocated", frozenset())
    assert (nodes["tx-02"].state, nodes["tx-02"].flags) == ("mixed", {"planned"})
    assert nodes["tx-02"].gpus_used == 5
    assert (nodes["tx-04"].state, nodes["tx-04"].flags) == ("idle", {"drain"})
    assert nodes["tx-04"].reason == "xid 79 GPU fallen off bus"
    assert nodes["tx-04"].reason_set_at == utc(2026, 11, 29, 7, 53, 57)
    assert nodes["tx-01"].reason_set_at is None
    assert nodes["tx-01"].partitions == ("gpu", "debug")


@pytest.mark.parametrize(
    "relative",
    [
        "24.11/scontrol_show_node.v0.0.40.json",
        "24.11/scontrol_show_node.v0.0.41.json",
        "24.11/rest/slurm_v0.0.40_nodes.json",
        "24.11/rest/slurm_v0.0.41_nodes.json",
        "24.11/rest/slurm_v0.0.42_nodes.json",
    ],
)
def test_2411_every_data_parser_version_reads_the_drained_node(relative):
    nodes = by_name(parsers.parse_nodes_json(load(relative)))
    assert nodes["tx-04"].flags == {"drain"}
    assert nodes["tx-04"].reason == "xid 79 GPU fallen off bus"


def test_2411_single_node_rest_answer_reads_the_drained_node():
    (node,) = parsers.parse_nodes_json(load("24.11/rest/slurm_v0.0.42_node_tx-04.json"))
    assert (node.name, node.state, node.flags) == ("tx-04", "idle", {"drain"})


def test_2411_drained_while_running_node_is_mixed_plus_drain_without_draining_token():
    for relative in (
        "24.11/snapshot2_draining_notresponding/scontrol_show_node.json",
        "24.11/snapshot2_draining_notresponding/rest_slurm_v0.0.41_nodes.json",
        "24.11/snapshot2_draining_notresponding/rest_slurm_v0.0.42_nodes.json",
    ):
        nodes = by_name(parsers.parse_nodes_json(load(relative)))
        assert (nodes["tx-02"].state, nodes["tx-02"].flags) == ("mixed", {"drain"})
        assert nodes["tx-02"].reason == "ECC DBE on GPU 3 (xid 48)"
        assert (nodes["tx-03"].state, nodes["tx-03"].flags) == ("idle", {"not_responding"})


def test_2411_text_nodes_match_json_in_the_draining_snapshot():
    text = read("24.11/snapshot2_draining_notresponding/scontrol_show_node_all.txt")
    nodes = by_name(parsers.parse_scontrol_nodes(text, UTC))
    assert (nodes["tx-02"].state, nodes["tx-02"].flags) == ("mixed", {"drain"})
    assert nodes["tx-02"].reason == "ECC DBE on GPU 3 (xid 48)"
    assert nodes["tx-02"].reason_set_at == utc(2026, 11, 29, 7, 58, 43)
    assert nodes["tx-03"].flags == {"not_responding"}


def test_2411_down_not_responding_node_reads_from_text_json_and_sinfo():
    folder = "24.11/snapshot3_down_notresponding"
    json_nodes = by_name(parsers.parse_nodes_json(load(f"{folder}/scontrol_show_node.json")))
    text_nodes = by_name(
        parsers.parse_scontrol_nodes(read(f"{folder}/scontrol_show_node_all.txt"), UTC)
    )
    sinfo_nodes = by_name(parsers.parse_nodes_json(load(f"{folder}/sinfo.json")))
    for nodes in (json_nodes, text_nodes, sinfo_nodes):
        assert nodes["tx-03"].state == "down"
        assert nodes["tx-03"].flags == {"not_responding"}
        assert nodes["tx-03"].reason == "Not responding"


def test_2411_sinfo_json_groups_merge_into_one_node_per_name():
    for relative in ("24.11/sinfo.json", "24.11/sinfo.v0.0.40.json", "24.11/sinfo.v0.0.41.json"):
        nodes = by_name(parsers.parse_nodes_json(load(relative)))
        assert sorted(nodes) == ["tx-01", "tx-02", "tx-03", "tx-04"]
        assert nodes["tx-02"].partitions == ("gpu", "debug")
        assert nodes["tx-04"].flags == {"drain"}
        assert nodes["tx-04"].reason_set_at == utc(2026, 11, 29, 7, 53, 57)
    draining = by_name(
        parsers.parse_nodes_json(load("24.11/snapshot2_draining_notresponding/sinfo.json"))
    )
    assert (draining["tx-02"].state, draining["tx-02"].flags) == ("mixed", {"drain"})


def test_2411_text_node_files_read_state_and_reason():
    nodes = by_name(parsers.parse_scontrol_nodes(read("24.11/scontrol_show_node_all.txt"), UTC))
    assert (nodes["tx-02"].state, nodes["tx-02"].flags) == ("mixed", {"planned"})
    assert nodes["tx-04"].reason == "xid 79 GPU fallen off bus"
    (single,) = parsers.parse_scontrol_nodes(read("24.11/scontrol_show_node_tx-01.txt"))
    assert (single.name, single.state) == ("tx-01", "allocated")
    (drained,) = parsers.parse_scontrol_nodes(read("24.11/scontrol_show_node_tx-04_drained.txt"))
    assert drained.flags == {"drain"}


# ---------------------------------------------------------------- 24.11 jobs


def test_2411_multinode_gpu_job_counts_gpus_across_nodes():
    jobs = by_id(parsers.parse_jobs_json(load("24.11/scontrol_show_job.json")))
    job = jobs[3]
    assert (job.state, job.user, job.account) == ("RUNNING", "alice", "research")
    assert job.nodes == ("tx-01", "tx-02")
    assert (job.node_count, job.gpus) == (2, 8)
    assert job.time_limit_minutes == 120
    assert job.start_time == utc(2026, 11, 29, 7, 53, 57)
    text = parsers.parse_scontrol_jobs(read("24.11/scontrol_show_job_3_running_multinode_gpu.txt"))
    assert (text[0].gpus, text[0].nodes) == (8, ("tx-01", "tx-02"))
    detail = parsers.parse_scontrol_jobs(read("24.11/scontrol_show_job_3_detail.txt"))
    assert detail[0].gpus == 8


def test_2411_partial_gpu_and_failed_jobs_read_gpus_and_exit_codes():
    jobs = by_id(parsers.parse_jobs_json(load("24.11/scontrol_show_job.json")))
    assert (jobs[4].partition, jobs[4].gpus, jobs[4].nodes) == ("debug", 2, ("tx-01",))
    assert (jobs[2].state, jobs[2].exit_code) == ("FAILED", 3)
    assert (jobs[1].state, jobs[1].exit_code) == ("COMPLETED", 0)


def test_2411_array_and_pending_jobs_read_reasons_and_unset_times():
    jobs = by_id(parsers.parse_jobs_json(load("24.11/scontrol_show_job.json")))
    assert (jobs[6].state, jobs[6].reason) == ("PENDING", "JobArrayTaskLimit")
    assert jobs[6].eligible_time is None
    assert (jobs[7].state, jobs[8].state) == ("RUNNING", "RUNNING")
    assert (jobs[9].reason, jobs[9].gpus, jobs[9].node_count) == ("Resources", 24, 3)
    assert (jobs[10].reason, jobs[10].eligible_time) == ("Dependency", None)
    array_text = by_id(parsers.parse_scontrol_jobs(read("24.11/scontrol_show_job_6_array.txt")))
    assert sorted(array_text) == [6, 7, 8]
    assert array_text[6].reason == "JobArrayTaskLimit"
    assert array_text[6].eligible_time is None


def test_2411_pending_dependency_and_resources_text_files_give_reasons():
    (dependency,) = parsers.parse_scontrol_jobs(
        read("24.11/scontrol_show_job_10_pending_dependency.txt")
    )
    assert (dependency.job_id, dependency.reason, dependency.time_limit_minutes) == (
        10,
        "Dependency",
        10,
    )
    (resources,) = parsers.parse_scontrol_jobs(
        read("24.11/scontrol_show_job_9_pending_resources.txt")
    )
    assert (resources.job_id, resources.reason, resources.node_count) == (9, "Resources", 3)


@pytest.mark.parametrize(
    "relative",
    [
        "24.11/scontrol_show_job.v0.0.40.json",
        "24.11/scontrol_show_job.v0.0.41.json",
        "24.11/squeue.json",
        "24.11/squeue.v0.0.40.json",
        "24.11/squeue.v0.0.41.json",
        "24.11/rest/slurm_v0.0.40_jobs.json",
        "24.11/rest/slurm_v0.0.41_jobs.json",
        "24.11/rest/slurm_v0.0.42_jobs.json",
        "24.11/snapshot2_draining_notresponding/squeue.json",
        "24.11/snapshot3_down_notresponding/squeue.json",
    ],
)
def test_2411_every_job_listing_reads_the_multinode_job(relative):
    job = by_id(parsers.parse_jobs_json(load(relative)))[3]
    assert (job.state, job.nodes, job.gpus) == ("RUNNING", ("tx-01", "tx-02"), 8)


def test_2411_full_text_listings_match_json():
    text_jobs = by_id(parsers.parse_scontrol_jobs(read("24.11/scontrol_show_job_all.txt")))
    json_jobs = by_id(parsers.parse_jobs_json(load("24.11/scontrol_show_job.json")))
    assert sorted(text_jobs) == sorted(json_jobs)
    for job_id, job in json_jobs.items():
        assert text_jobs[job_id].state == job.state
        assert text_jobs[job_id].gpus == job.gpus
    for folder in ("snapshot2_draining_notresponding", "snapshot3_down_notresponding"):
        snapshot_text = by_id(
            parsers.parse_scontrol_jobs(read(f"24.11/{folder}/scontrol_show_job_all.txt"))
        )
        snapshot_json = by_id(
            parsers.parse_jobs_json(load(f"24.11/{folder}/scontrol_show_job.json"))
        )
        assert {k: j.state for k, j in snapshot_text.items()} == {
            k: j.state for k, j in snapshot_json.items()
        }


def test_2411_down_snapshot_keeps_job_9_pending_for_resources():
    jobs = by_id(
        parsers.parse_jobs_json(load("24.11/snapshot3_down_notresponding/scontrol_show_job.json"))
    )
    assert (jobs[9].state, jobs[9].reason) == ("PENDING", "Resources")


def test_2411_requeued_job_is_pending_begin_time_with_restart_count_one():
    (job,) = parsers.parse_jobs_json(load("24.11/requeue/scontrol_show_job_5_after_requeue.json"))
    assert (job.state, job.reason, job.restart_count) == ("PENDING", "BeginTime", 1)
    assert job.nodes == ()
    assert job.eligible_time == utc(2026, 11, 29, 7, 56, 35)
    (text,) = parsers.parse_scontrol_jobs(
        read("24.11/requeue/scontrol_show_job_5_after_requeue.txt"), UTC
    )
    assert (text.state, text.reason, text.restart_count) == ("PENDING", "BeginTime", 1)
    assert text.eligible_time == job.eligible_time


def test_2411_requeued_job_runs_again_with_restart_count_kept():
    (job,) = parsers.parse_jobs_json(
        load("24.11/requeue/scontrol_show_job_5_after_requeue_restarted.json")
    )
    assert (job.state, job.restart_count, job.nodes) == ("RUNNING", 1, ("tx-01",))
    (text,) = parsers.parse_scontrol_jobs(
        read("24.11/requeue/scontrol_show_job_5_after_requeue_restarted.txt")
    )
    assert (text.state, text.restart_count) == ("RUNNING", 1)


def test_2411_requeue_hold_reads_as_held_pending_job():
    (job,) = parsers.parse_jobs_json(
        load("24.11/requeue/scontrol_show_job_4_after_requeuehold.json")
    )
    assert (job.state, job.reason, job.restart_count) == ("PENDING", "JobHeldUser", 1)
    (text,) = parsers.parse_scontrol_jobs(
        read("24.11/requeue/scontrol_show_job_4_after_requeuehold.txt")
    )
    assert text.reason == "job_requeued_in_held_state"
    (released,) = parsers.parse_scontrol_jobs(
        read("24.11/requeue/scontrol_show_job_4_after_release.txt")
    )
    assert released.reason == "BeginTime"
    (completed,) = parsers.parse_scontrol_jobs(
        read("24.11/requeue/scontrol_show_job_11_completed_then_requeued.txt")
    )
    assert (completed.state, completed.restart_count) == ("PENDING", 1)


def test_2411_rest_single_job_and_state_listing_parse():
    (job,) = parsers.parse_jobs_json(load("24.11/rest/slurm_v0.0.42_job_3.json"))
    assert (job.job_id, job.gpus) == (3, 8)
    states = by_id(parsers.parse_jobs_json(load("24.11/rest/slurm_v0.0.42_jobs_state.json")))
    assert states[1].state == "COMPLETED"
    assert states[2].state == "FAILED"


# ---------------------------------------------------------------- 24.11 sacct


def test_2411_sacct_reads_finished_cancelled_and_timed_out_jobs():
    jobs = by_id(parsers.parse_sacct_json(load("24.11/sacct_cancelled_timeout.json")))
    assert jobs[13].state == "TIMEOUT"
    assert jobs[13].time_limit_minutes == 1
    assert jobs[10].state == "CANCELLED"
    # Cancelled while pending: sacct's start time is NO_VAL (4294967294).
    assert jobs[10].start_time is None
    assert jobs[10].nodes == ()
    assert jobs[5].restart_count == 1


def test_2411_sacct_duplicates_list_every_attempt_of_a_requeued_job():
    records = parsers.parse_sacct_json(load("24.11/requeue/sacct_job5_duplicates.json"))
    assert [(job.job_id, job.state) for job in records] == [(5, "REQUEUED"), (5, "RUNNING")]
    (latest,) = parsers.parse_sacct_json(load("24.11/requeue/sacct_job5.json"))
    assert (latest.state, latest.restart_count) == ("RUNNING", 1)


@pytest.mark.parametrize(
    "relative",
    [
        "24.11/sacct_finished_jobs.json",
        "24.11/sacct_finished_jobs.v0.0.40.json",
        "24.11/sacct_finished_jobs.v0.0.41.json",
    ],
)
def test_2411_sacct_finished_jobs_read_exit_codes_in_every_version(relative):
    jobs = by_id(parsers.parse_sacct_json(load(relative)))
    assert (jobs[1].state, jobs[1].exit_code, jobs[1].gpus) == ("COMPLETED", 0, 1)
    assert (jobs[2].state, jobs[2].exit_code, jobs[2].gpus) == ("FAILED", 3, 2)
    assert jobs[11].nodes == ("tx-02", "tx-03")


def test_2411_sacct_multinode_job_and_full_listings():
    (job,) = parsers.parse_sacct_json(load("24.11/sacct_job3_multinode_gpu_cancelled.json"))
    assert (job.state, job.nodes, job.gpus) == ("CANCELLED", ("tx-01", "tx-02"), 8)
    all_jobs = by_id(parsers.parse_sacct_json(load("24.11/sacct_all.json")))
    assert all_jobs[9].state == "PENDING"
    assert all_jobs[9].start_time is None
    for relative in (
        "24.11/rest/slurmdb_v0.0.40_jobs.json",
        "24.11/rest/slurmdb_v0.0.41_jobs.json",
        "24.11/rest/slurmdb_v0.0.42_jobs.json",
    ):
        assert by_id(parsers.parse_sacct_json(load(relative)))[2].exit_code == 3
    (failed,) = parsers.parse_sacct_json(load("24.11/rest/slurmdb_v0.0.42_job_2.json"))
    assert (failed.user, failed.exit_code) == ("bob", 3)


# ---------------------------------------------------------------- 24.11 partitions


def test_2411_partitions_read_from_text_and_json():
    text = by_name(parsers.parse_scontrol_partitions(read("24.11/scontrol_show_partition.txt")))
    assert text["gpu"].default is True
    assert text["debug"].max_time_minutes == 60
    assert text["debug"].nodes == ("tx-01", "tx-02")
    assert text["debug"].total_gpus == 16
    for relative in (
        "24.11/scontrol_show_partition.json",
        "24.11/rest/slurm_v0.0.42_partitions.json",
    ):
        json_parts = by_name(parsers.parse_partitions_json(load(relative)))
        assert json_parts["debug"].max_time_minutes == 60
        assert json_parts["gpu"].max_time_minutes is None
        assert json_parts["gpu"].nodes == ("tx-01", "tx-02", "tx-03", "tx-04")
        assert json_parts["gpu"].total_gpus == 32


def test_slurm_conf_partition_lines_give_configured_members():
    conf = read("24.11/cluster-config/slurm.conf")
    assert parsers.parse_slurm_conf_partitions(conf) == {
        "gpu": ("tx-01", "tx-02", "tx-03", "tx-04"),
        "debug": ("tx-01", "tx-02"),
    }
    assert parsers.parse_slurm_conf_partitions('PartitionName=spare Nodes="" Default=NO') == {
        "spare": ()
    }


def test_versions_read_from_both_package_banners():
    assert parsers.parse_slurm_version("slurm-wlm 22.05.8") == (22, 5)
    assert parsers.parse_slurm_version("slurm 24.11.5") == (24, 11)


# ---------------------------------------------------------------- every sample


# Human-readable tables, configs and notes: read by people, not by Medbay.
REFERENCE_ONLY = {
    "22.05/rest_slurm_v0.0.38_diag.json",
    "22.05/sacct_pipe_format.txt",
    "22.05/scontrol_json_unsupported_22.05.txt",
    "22.05/sinfo_-R.txt",
    "22.05/sinfo_N_pipe_format.txt",
    "22.05/sinfo_default.txt",
    "22.05/sinfo_state_variety_pipe.txt",
    "22.05/squeue_default.txt",
    "22.05/squeue_pipe_format.txt",
    "22.05/sreport_cluster_utilization.txt",
    "24.11/SCENARIO.txt",
    "24.11/cluster-config/cgroup.conf",
    "24.11/cluster-config/gres.conf",
    "24.11/cluster-config/package-versions.txt",
    "24.11/cluster-config/slurmdbd.conf",
    "24.11/requeue/requeue_job5_stdout.txt",
    "24.11/requeue/requeue_notes.txt",
    "24.11/requeue/sacct_job5_duplicates.txt",
    "24.11/requeue/squeue_after_requeuehold.txt",
    "24.11/requeue/squeue_job5_after_requeue.txt",
    "24.11/rest/openapi_paths.txt",
    "24.11/rest/slurm_v0.0.42_diag.json",
    "24.11/rest/slurm_v0.0.42_ping.json",
    "24.11/rest/slurmdb_v0.0.42_ping.json",
    "24.11/sacct_all.txt",
    "24.11/sacct_all_parsable.txt",
    "24.11/sacct_cancelled_timeout.txt",
    "24.11/sacct_finished_jobs.txt",
    "24.11/sacct_job3_multinode_gpu_cancelled.txt",
    "24.11/sinfo.txt",
    "24.11/sinfo_Nl.txt",
    "24.11/sinfo_R.txt",
    "24.11/sinfo_custom_gres.txt",
    "24.11/squeue.txt",
    "24.11/squeue_array_expanded.txt",
    "24.11/squeue_custom.txt",
    "24.11/squeue_long.txt",
    # sacct's text beside its JSON, and an empty window (no records at all).
    "22.05/accounting/sacct_D_X_alice_bob.txt",
    "22.05/accounting/sacct_nothing_found.json",
}
for folder in ("snapshot2_draining_notresponding", "snapshot3_down_notresponding"):
    for name in ("sinfo.txt", "sinfo_Nl.txt", "sinfo_R.txt", "sinfo_custom_gres.txt", "squeue.txt"):
        REFERENCE_ONLY.add(f"24.11/{folder}/{name}")
REFERENCE_ONLY.add("24.11/cluster-config/slurm.conf")
# Outages, not data: tests/chaos/test_slurm_unreachable.py checks they are refused.
REFERENCE_ONLY.update(f"{v}/scontrol_show_job_controller_down.json" for v in ("24.11", "26.05"))
# slurmdbd's REST answers that are no records (the API's paths, an empty window,
# slurmdbd down, the window asked for): tests/clusters/test_accounting_rest.py reads them.
for version, api in (("24.11", "v0.0.42"), ("26.05", "v0.0.45")):
    REFERENCE_ONLY.update(
        f"{version}/rest/accounting/{name}"
        for name in (
            "openapi_paths.json",
            f"slurmdb_{api}_jobs_empty.json",
            f"slurmdb_{api}_jobs_slurmdbd_down.json",
            f"slurmdb_{api}_jobs_slurmdbd_down.status",
            "window.txt",
        )
    )


def parse_any_sample(relative: str) -> list:
    """Picks the parser for a sample by its name and shape."""
    name = relative.rsplit("/", 1)[-1]
    if name.endswith(".txt"):
        text = read(relative)
        if text.startswith("NodeName="):
            return parsers.parse_scontrol_nodes(text)
        if text.startswith("JobId="):
            return parsers.parse_scontrol_jobs(text)
        return parsers.parse_scontrol_partitions(text)
    document = load(relative)
    if "sinfo" in document or "nodes" in document:
        return parsers.parse_nodes_json(document)
    if "partitions" in document:
        return parsers.parse_partitions_json(document)
    if "sacct" in name or "slurmdb" in name:
        return parsers.parse_sacct_json(document)
    return parsers.parse_jobs_json(document)


ALL_SAMPLES = sorted(
    str(path.relative_to(FIXTURES)) for path in FIXTURES.rglob("*") if path.is_file()
)


@pytest.mark.parametrize("relative", [s for s in ALL_SAMPLES if s not in REFERENCE_ONLY])
def test_every_machine_readable_sample_parses_into_named_records(relative):
    records = parse_any_sample(relative)
    assert records
    for record in records:
        if hasattr(record, "job_id"):
            assert record.job_id > 0
        else:
            assert record.name
        if hasattr(record, "flags"):
            assert record.state in NODE_BASE_STATES


def test_every_shared_sample_is_copied_into_the_fixtures():
    shared = Path("/work/shared/slurm-samples")
    if not shared.is_dir():
        pytest.skip("the shared samples folder is not on this machine")
    expected = {
        str(path.relative_to(shared))
        for path in shared.rglob("*")
        if path.is_file() and not path.name.endswith(".gz")
    }
    assert expected <= set(ALL_SAMPLES)


JOB_LIST_SAMPLES = [
    relative
    for relative in ALL_SAMPLES
    if relative.endswith(".json")
    and "sacct" not in relative
    and "slurmdb" not in relative
    and "jobs" in load(relative)
]


def test_every_job_list_sample_is_covered():
    assert {"22.05/squeue.json", "24.11/scontrol_show_job.json"} <= set(JOB_LIST_SAMPLES)
    assert len(JOB_LIST_SAMPLES) >= 10


@pytest.mark.parametrize("relative", JOB_LIST_SAMPLES)
def test_decoding_only_the_read_keys_parses_every_job_sample_the_same(relative):
    text = (FIXTURES / relative).read_text()
    narrowed = parsers.decode_jobs_json(text)
    assert parsers.parse_jobs_json(narrowed) == parsers.parse_jobs_json(json.loads(text))
    # last_update tells a live controller's empty list from a stopped one's (24.11+);
    # warnings carry slurmrestd's "No job changes since ..." (update_time polls).
    assert set(narrowed) <= {"jobs", "errors", "warnings", "last_update"}


def test_the_narrowed_job_decode_keeps_absent_apart_from_null():
    document = parsers.decode_jobs_json(b'{"jobs": [{"job_id": 5, "state": ["RUNNING"]}]}')
    assert document == {"jobs": [{"job_id": 5, "state": ["RUNNING"]}]}
    (job,) = parsers.parse_jobs_json(document)
    assert (job.state, job.requeue) == ("RUNNING", True)
    (held,) = parsers.parse_jobs_json(parsers.decode_jobs_json(b'{"jobs": [{"requeue": null}]}'))
    assert held.requeue is False


def test_the_job_list_parser_reuses_unchanged_jobs_and_reparses_changed_ones():
    document = parsers.decode_jobs_json((FIXTURES / "24.11/scontrol_show_job.json").read_text())
    parser = parsers.JobListParser()
    first = by_id(parser.parse(document))
    changed = copy.deepcopy(document)
    record = next(raw for raw in changed["jobs"] if raw["job_id"] == 3)
    record["job_state"], record["restart_cnt"] = ["PENDING", "REQUEUED"], 1
    second = by_id(parser.parse(changed))
    assert second == by_id(parsers.parse_jobs_json(changed))
    assert (second[3].state, second[3].restart_count) == ("PENDING", 1)
    assert first[3] is not second[3]
    assert all(second[job_id] is first[job_id] for job_id in first if job_id != 3)
    assert by_id(parser.parse(document)) == first


def test_squeue_start_lists_each_pending_jobs_expected_start_and_skips_unknown_ones():
    from datetime import UTC, datetime

    from clusters.backends.slurm_parsers import parse_squeue_starts

    text = "41|2026-03-01T10:15:00\n42|N/A\n43_[1-4]|2026-03-01T11:00:00\n44|\n"

    assert parse_squeue_starts(text, UTC) == {41: datetime(2026, 3, 1, 10, 15, tzinfo=UTC)}
