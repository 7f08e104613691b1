"""What if: a policy replayed over recorded demand, with nothing moved."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from demand.replay import Frame, directions, replay
from demand.rules import DEFAULT_POLICY, DemandSnapshot, NodeState, Pool, Sample, TrainingQueue

START = datetime(2025, 3, 3, 2, 0, tzinfo=UTC)
POLICY = replace(DEFAULT_POLICY, hysteresis_s=600, cooldown_s=3600)


def frames(load_ms, *, minutes=30, pending=4, waited_s=3600, nodes=None, errors=None):
    """One frame a minute; `load_ms(minute)` is the recorded inference p95."""
    nodes = nodes or default_nodes
    out = []
    for minute in range(minutes):
        at = START + timedelta(minutes=minute)
        samples = tuple(
            Sample(load_ms(m), START + timedelta(minutes=m)) for m in range(minute - 11, minute + 1)
        )
        queue = TrainingQueue("train", 1 if pending else 0, pending, pending * 8,
                              waited_s + minute * 60 if pending else 0, at)  # fmt: skip
        snapshot = DemandSnapshot(training=(queue,), inference_load=samples, errors=errors or {})
        out.append(Frame(at, snapshot, nodes(minute)))
    return out


def default_nodes(minute):
    return [NodeState(f"train-{i}", Pool.TRAINING, busy=True) for i in range(2)] + [
        NodeState(f"infer-{i}", Pool.INFERENCE) for i in range(6)
    ]


def test_a_quiet_inference_pool_would_have_lent_nodes_to_a_waiting_queue():
    recorded = frames(lambda m: 100)
    result = replay(POLICY, recorded)
    assert directions(result) == {"to_inference": 0, "to_training": 3}
    assert {r.move.node for r in result.moves} == {"infer-0", "infer-1", "infer-2"}
    assert all(r.rule == "training_waiting" for r in result.moves)
    assert "training queue 1 job for 4 nodes" in result.moves[0].reason
    # 3 nodes lent from the first frame on, 29 minutes, 8 GPUs each.
    assert result.gpu_hours_gained_for_training == pytest.approx(3 * 8 * 29 / 60)
    assert result.training_wait_past_target_minutes == 29
    # 3 lent for 4 waiting nodes: the queue was never fully covered.
    assert result.training_wait_past_target_uncovered_minutes == 29


def test_nothing_recorded_is_changed():
    recorded = frames(lambda m: 100)
    before = [list(frame.nodes) for frame in recorded]
    replay(POLICY, recorded)
    assert [list(frame.nodes) for frame in recorded] == before


def test_the_replay_lends_each_node_once_and_stops_when_the_queue_is_covered():
    result = replay(POLICY, frames(lambda m: 100, minutes=120, pending=2))
    assert len(result.moves) == 2
    assert result.training_wait_past_target_uncovered_minutes == 0
    assert result.holds.get("hold_balanced", 0) > 100


def test_missing_data_in_the_record_holds_the_replay_too():
    result = replay(POLICY, frames(lambda m: 100, errors={"inference_load": "Prometheus down"}))
    assert result.moves == []
    assert result.holds == {"hold_missing_signal": 30}
    assert result.gpu_hours_gained_for_training == 0


def test_a_heavy_load_would_have_taken_idle_training_nodes_and_spent_less_time_over_target():
    def nodes(minute):
        return [NodeState(f"train-{i}", Pool.TRAINING) for i in range(4)] + [
            NodeState(f"infer-{i}", Pool.INFERENCE) for i in range(4)
        ]

    result = replay(POLICY, frames(lambda m: 360, nodes=nodes, pending=0))
    # ceil(4 * 360 / 225) = 7 inference nodes wanted: 3 more.
    assert directions(result)["to_inference"] == 3
    assert result.minutes_over_target_recorded == 29
    # Recorded 360 ms on 4 nodes is estimated at 206 ms on 7 from the first frame on.
    assert result.minutes_over_target_estimated == 0


def test_a_busy_training_node_arrives_only_when_the_record_shows_its_job_ended():
    def nodes(minute):
        return [NodeState("train-0", Pool.TRAINING, busy=minute < 20)] + [
            NodeState(f"infer-{i}", Pool.INFERENCE) for i in range(4)
        ]

    result = replay(POLICY, frames(lambda m: 360, nodes=nodes, pending=0))
    assert [r.move.node for r in result.moves] == ["train-0"]
    assert result.moves[0].move.waits_for_jobs
    # Over target until the node lands at minute 20 (scaled 360 * 4/5 = 288 ms after).
    assert result.minutes_over_target_estimated == 20


def test_plain_tuples_are_accepted():
    recorded = [(f.at, f.snapshot, f.nodes) for f in frames(lambda m: 100)]
    assert len(replay(POLICY, recorded).moves) == 3
