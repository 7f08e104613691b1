"""The simulator's demand mode: the daily inference curve, bursty training, expected starts."""

from __future__ import annotations

from datetime import timedelta

from clusters.backends.base import JobSubmission
from clusters.backends.simulated import InferenceCurve, SimulatedCluster

FOUR = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:8\n"


def simulator() -> SimulatedCluster:
    sim = SimulatedCluster.standard(train=4, infer=2, spare=1, seed=9)
    sim.fault_rate_per_gpu_day = 0
    return sim


def test_the_inference_curve_peaks_at_three_times_its_trough_twelve_hours_in():
    curve = InferenceCurve(trough_nodes=1.0)

    assert curve.demand_nodes(timedelta(0)) == 1.0
    assert curve.demand_nodes(timedelta(hours=12)) == 3.0
    assert curve.demand_nodes(timedelta(hours=24)) == 1.0


def test_the_p95_rises_with_the_load_and_falls_with_more_inference_nodes():
    sim = simulator()
    sim.demand_mode(InferenceCurve(trough_nodes=0.5))
    trough, unit = sim.inference_load()
    sim.advance(timedelta(hours=12))
    peak, _ = sim.inference_load()
    sim.move_to_pool("gpu-01", "inference")
    helped, _ = sim.inference_load()

    assert unit == "latency_ms"
    assert round(trough, 1) == 133.3  # a quarter used: 100 ms / (1 - 0.25)
    assert round(peak) == 400  # three quarters used
    assert round(helped) == 200  # the same traffic on three nodes


def test_training_work_arrives_in_bursts_not_a_topped_up_queue():
    sim = simulator()
    sim.demand_mode()

    sim.generate_workload()
    first = len(sim.jobs())
    sim.generate_workload()  # before the next burst is due: nothing new

    assert first > 0 and len(sim.jobs()) == first
    assert all(job.partition == "train" for job in sim.jobs())
    assert sum(job.node_count for job in sim.jobs()) >= 3  # 0.8 to 1.6 times 4 nodes


def test_a_waiting_job_is_expected_to_start_when_the_running_one_ends():
    sim = simulator()
    first = sim.submit_job(JobSubmission(script=FOUR, user="alice"))
    sim.advance(timedelta(seconds=1))
    second = sim.submit_job(JobSubmission(script=FOUR, user="bob"))
    sim.advance(timedelta(seconds=1))

    running = sim.job(first)
    assert sim.expected_starts() == {second: running.start_time + running.duration}
