from datetime import timedelta

import pytest

from clusters.backends.base import BackendError, JobSubmission
from clusters.backends.simulated import SimulatedCluster

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --partition=train\n"


def two_node_job(sim: SimulatedCluster) -> int:
    job_id = sim.submit_job(
        JobSubmission(
            script=SCRIPT + "#SBATCH --nodes=2\n#SBATCH --gres=gpu:8\nsrun x\n", user="alice"
        )
    )
    sim.advance(timedelta(seconds=1))
    return job_id


@pytest.fixture
def sim():
    simulator = SimulatedCluster.standard(train=4, infer=1, spare=1, seed=1)
    simulator.fault_rate_per_gpu_day = 0
    return simulator


def node(sim, name):
    return next(n for n in sim.nodes() if n.name == name)


def job(sim, job_id):
    return next(j for j in sim.jobs() if j.job_id == job_id)


def test_a_submitted_job_runs_with_its_gres_gpus_and_records_the_user(sim):
    job_id = two_node_job(sim)
    info = job(sim, job_id)
    assert info.state == "RUNNING"
    assert info.user == "alice"
    assert info.gpus == 16
    assert [node(sim, name).state for name in info.nodes] == ["allocated", "allocated"]


def test_drain_lets_running_jobs_finish_and_then_the_node_is_drained(sim):
    job_id = two_node_job(sim)
    first = job(sim, job_id).nodes[0]
    sim.drain_node(first, "medbay: test")
    assert job(sim, job_id).state == "RUNNING"
    assert node(sim, first).flags == {"drain"}
    assert node(sim, first).state == "allocated"
    sim.job(job_id).duration = timedelta(seconds=5)
    sim.advance(timedelta(seconds=10))
    assert job(sim, job_id).state == "COMPLETED"
    assert node(sim, first).state == "idle"
    assert "drain" in node(sim, first).flags


def test_down_kills_running_jobs_and_requeues_the_requeueable_ones(sim):
    job_id = two_node_job(sim)
    first = job(sim, job_id).nodes[0]
    sim.down_node(first, "medbay: dead")
    info = job(sim, job_id)
    assert info.state == "PENDING"
    assert info.restart_count == 1
    assert node(sim, first).state == "down"


def test_down_ends_a_non_requeueable_job_as_node_fail(sim):
    job_id = sim.submit_job(
        JobSubmission(script=SCRIPT + "#SBATCH --no-requeue\n#SBATCH --gres=gpu:8\n", user="bob")
    )
    sim.advance(timedelta(seconds=1))
    sim.down_node(job(sim, job_id).nodes[0], "medbay: dead")
    assert job(sim, job_id).state == "NODE_FAIL"


def test_requeue_returns_a_job_to_pending_and_holds_it_for_cred_expire(sim):
    job_id = two_node_job(sim)
    sim.requeue_job(job_id)
    info = job(sim, job_id)
    assert (info.state, info.restart_count) == ("PENDING", 1)
    sim.advance(timedelta(seconds=60))
    assert job(sim, job_id).state == "PENDING"
    sim.advance(timedelta(seconds=62))
    assert job(sim, job_id).state == "RUNNING"


def test_start_now_releases_a_requeued_job_early(sim):
    job_id = two_node_job(sim)
    sim.requeue_job(job_id)
    sim.start_now(job_id)
    sim.advance(timedelta(seconds=1))
    assert job(sim, job_id).state == "RUNNING"


def test_requeue_of_a_pending_job_is_refused_like_slurm(sim):
    job_id = two_node_job(sim)
    sim.requeue_job(job_id)
    with pytest.raises(BackendError, match="pending execution") as error:
        sim.requeue_job(job_id)
    assert error.value.permanent


def test_drain_without_a_reason_is_refused(sim):
    with pytest.raises(BackendError) as error:
        sim.drain_node("gpu-01", "  ")
    assert error.value.permanent


def test_unknown_nodes_and_jobs_are_permanent_errors(sim):
    with pytest.raises(BackendError):
        sim.drain_node("nope", "x")
    with pytest.raises(BackendError):
        sim.cancel_job(999999)


def test_replace_moves_a_free_spare_into_the_failed_nodes_partition(sim):
    spare = sim.spare_capacity()[0]
    replacement = sim.replace("gpu-02", "medbay: Action:Replace [run 1]")
    assert replacement == spare
    assert node(sim, spare).partitions == ("train",)
    assert "fail" in node(sim, "gpu-02").flags
    assert sim.spare_capacity() == []
    with pytest.raises(BackendError, match="spare"):
        sim.replace("gpu-03", "medbay: again")


def test_injected_xid_marks_the_gpu_and_reaches_listeners(sim):
    seen = []
    sim.fault_listeners.append(seen.append)
    fault = sim.inject_xid("gpu-03", 3, 79)
    assert sim.gpu_health("gpu-03")[3] == "failed"
    assert seen == [fault]
    assert fault.xid == 79 and "fallen off the bus" in fault.message


def snapshot(sim):
    return (sim.nodes(), sim.jobs(), [(f.node, f.gpu, f.xid) for f in sim.faults])


def run_busy_day(seed: int):
    sim = SimulatedCluster.standard(train=8, infer=2, spare=2, seed=seed)
    sim.fault_rate_per_gpu_day = 0.05
    for _ in range(48):
        sim.generate_workload()
        sim.advance(timedelta(minutes=30))
    return snapshot(sim)


def test_the_simulator_is_deterministic_under_a_seed():
    first = run_busy_day(3)
    assert first == run_busy_day(3)
    assert first != run_busy_day(4)
    assert first[2], "a busy day at this rate produces faults"


def test_time_scale_speeds_up_simulated_time():
    ticks = iter([0.0, 2.0])
    sim = SimulatedCluster.standard(
        train=1, infer=0, spare=0, time_scale=60, clock=lambda: next(ticks)
    )
    before = sim.now
    sim.tick()
    assert sim.now - before == timedelta(minutes=2)


def test_a_sized_simulator_lays_out_the_demo_proportions_under_a_prefix():
    sim = SimulatedCluster.sized(12_500, prefix="storm")
    counts = {p.name: len(p.nodes) for p in sim.partitions()}
    assert counts == {"train": 9_376, "infer": 1_562, "spare": 1_562}
    assert sim.nodes()[0].name == "storm-00001"


def test_reading_named_nodes_gives_what_the_whole_list_says_about_them():
    sim = SimulatedCluster.standard(seed=7)
    sim.generate_workload()
    sim.advance(timedelta(minutes=1))
    sim.drain_node("gpu-03", "bad GPU")
    everything = {info.name: info for info in sim.nodes()}
    named = sim.nodes_named(["gpu-03", "gpu-01", "no-such-node", "gpu-03"])
    assert named == [everything["gpu-03"], everything["gpu-01"]]
    assert any(info.gpus_used for info in everything.values())


def test_a_process_builds_its_simulator_from_the_layout_settings(settings):
    from clusters.backends import registry

    settings.MEDBAY_BACKEND, settings.MEDBAY_SIM_NODES = "simulated", 64
    settings.MEDBAY_SIM_PREFIX = "bench"
    registry.use(None)
    try:
        names = [info.name for info in registry.get_backend().nodes()]
    finally:
        registry.use(None)
    assert (len(names), names[0], names[-1]) == (64, "bench-01", "bench-64")
