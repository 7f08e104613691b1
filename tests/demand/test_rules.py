"""The reallocation policy's decision core: each rule, each hold, each limit."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from demand.rules import (
    DEFAULT_POLICY,
    DemandSnapshot,
    Direction,
    InferenceQueue,
    InferenceUnit,
    KubernetesDemand,
    Mode,
    NodeState,
    Policy,
    Pool,
    RecentMove,
    Rule,
    Sample,
    Signal,
    TrainingQueue,
    decide,
    validate,
)

NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
POLICY = replace(DEFAULT_POLICY, hysteresis_s=600, cooldown_s=3600, max_moves_per_hour=10)


def load(value: float, minutes: int = 12, *, step: int = 1) -> tuple[Sample, ...]:
    """A load that has sat at `value` for `minutes`, sampled every `step` minutes."""
    return tuple(Sample(value, NOW - timedelta(minutes=m)) for m in range(minutes, -1, -step))


def queue(nodes: int = 0, waited_s: float = 0, *, jobs: int | None = None, **kw) -> TrainingQueue:
    jobs = (1 if nodes else 0) if jobs is None else jobs
    return TrainingQueue("train", jobs, nodes, nodes * 8, waited_s, kw.pop("at", NOW), **kw)


def snapshot(value: float = 200, minutes: int = 12, training=None, **kw) -> DemandSnapshot:
    return DemandSnapshot(
        training=(queue(),) if training is None else training,
        inference_load=load(value, minutes),
        **kw,
    )


def fleet(training: int = 4, inference: int = 4, **overrides) -> list[NodeState]:
    """train-NN and infer-NN nodes, idle; `overrides` maps a name to field changes."""
    nodes = [NodeState(f"train-{i:02}", Pool.TRAINING) for i in range(training)]
    nodes += [NodeState(f"infer-{i:02}", Pool.INFERENCE) for i in range(inference)]
    return [replace(node, **overrides.get(node.name.replace("-", "_"), {})) for node in nodes]


def moved(decision) -> list[str]:
    return [move.node for move in decision.moves]


# --- inference first ---------------------------------------------------------------


def test_it_moves_idle_training_nodes_to_inference_when_latency_stays_over_target():
    decision = decide(POLICY, snapshot(412), fleet(), [], NOW)
    assert decision.rule == Rule.INFERENCE_OVER_TARGET
    assert all(move.direction == Direction.TO_INFERENCE for move in decision.moves)
    # 4 nodes at 412 ms, aiming at 225 ms: ceil(4 * 412 / 225) = 8, so 4 more.
    assert len(decision.moves) == 4
    assert decision.reason.startswith("inference p95 412 ms > target 300 ms for 12 min")
    assert "4 idle training nodes; training queue empty" in decision.reason
    assert decision.evidence["inference_load"] == 412
    assert decision.evidence["scale_up_above"] == 255
    assert decision.evidence["rule"] == "inference_over_target"


def test_it_moves_before_the_target_is_crossed_once_the_load_is_high_in_the_band():
    decision = decide(POLICY, snapshot(270), fleet(), [], NOW)
    assert decision.rule == Rule.INFERENCE_OVER_TARGET
    assert "270 ms > 255 ms (85% of the 300 ms target)" in decision.reason


def test_it_holds_until_the_load_has_been_high_for_the_hysteresis():
    decision = decide(POLICY, snapshot(412, minutes=4), fleet(), [], NOW)
    assert decision.holds and decision.rule == Rule.HOLD_HYSTERESIS
    assert "for 4 min of the 10 min hysteresis" in decision.reason


def test_one_dip_below_the_band_restarts_the_hysteresis():
    samples = list(load(412))
    samples[-3] = Sample(200, samples[-3].at)
    decision = decide(POLICY, replace(snapshot(), inference_load=tuple(samples)), fleet(), [], NOW)
    assert decision.rule == Rule.HOLD_HYSTERESIS


def test_the_pool_is_sized_from_samples_taken_since_it_last_changed():
    arrived = RecentMove("train-09", Direction.TO_INFERENCE, NOW - timedelta(minutes=20),
                         done_at=NOW - timedelta(minutes=3))  # fmt: skip
    samples = tuple(Sample(412 if s.at < arrived.done_at else 270, s.at) for s in load(0))
    state = replace(snapshot(), inference_load=samples)
    decision = decide(POLICY, state, fleet(), [arrived], NOW)
    # Still over the band after the arrival, so it moves (the arrival does not restart
    # the hysteresis); sized from the 270 ms since, not 412: ceil(4 * 270 / 225) = 5.
    assert decision.rule == Rule.INFERENCE_OVER_TARGET
    assert len(decision.moves) == 1


def test_a_node_leaving_inference_counts_as_a_change_from_the_moment_it_drains():
    left = RecentMove("infer-09", Direction.TO_TRAINING, NOW - timedelta(minutes=2))
    samples = tuple(Sample(150 if s.at < left.at else 100, s.at) for s in load(0))
    state = replace(snapshot(), inference_load=samples, training=(queue(8, 3600),))
    decision = decide(POLICY, state, fleet(0, 6), [left], NOW)
    # Sized from the 100 ms since it left: ceil(6 * 100 / 225) = 3 needed, 3 spare.
    assert len(decision.moves) == 3


def test_nodes_already_on_their_way_count_against_what_inference_needs():
    nodes = fleet(training=4, inference=4)
    nodes[:4] = [replace(n, moving_to=Pool.INFERENCE) for n in nodes[:4]]
    decision = decide(POLICY, snapshot(412), nodes + fleet(training=4, inference=0), [], NOW)
    assert decision.rule == Rule.HOLD_UNDER_WAY
    assert "4 nodes already on their way" in decision.reason


def test_pending_inference_work_in_slurm_takes_training_nodes_without_a_load_signal():
    policy = replace(POLICY, signals=frozenset({Signal.TRAINING, Signal.INFERENCE_QUEUE}))
    waiting = InferenceQueue("infer", pending_jobs=1, pending_nodes=2, allocated_nodes=4, at=NOW)
    state = DemandSnapshot(training=(queue(),), inference_queue=waiting)
    decision = decide(policy, state, fleet(), [], NOW)
    assert decision.rule == Rule.INFERENCE_QUEUED
    assert len(decision.moves) == 2


def test_unplaced_kubernetes_pods_take_training_nodes():
    pods = KubernetesDemand(desired_replicas=6, current_replicas=4, pending_pods=2, at=NOW,
                            pods_per_node=2)  # fmt: skip
    decision = decide(POLICY, snapshot(200, kubernetes=pods), fleet(), [], NOW)
    assert decision.rule == Rule.INFERENCE_QUEUED
    assert len(decision.moves) == 2  # (2 pending + 2 more wanted) / 2 per node


def test_inference_wins_over_a_waiting_training_queue():
    state = snapshot(412, training=(queue(nodes=8, waited_s=7200),))
    decision = decide(POLICY, state, fleet(), [], NOW)
    assert decision.rule == Rule.INFERENCE_OVER_TARGET
    assert "training queue 1 job for 8 nodes, waiting 2 h" in decision.reason


# --- training next ---------------------------------------------------------------


def test_it_lends_idle_inference_nodes_to_training_jobs_waiting_past_the_target():
    state = snapshot(100, training=(queue(nodes=6, waited_s=3600),))
    decision = decide(POLICY, state, fleet(training=2, inference=6), [], NOW)
    assert decision.rule == Rule.TRAINING_WAITING
    assert all(move.direction == Direction.TO_TRAINING for move in decision.moves)
    # 6 inference nodes at 100 ms need ceil(6 * 100 / 225) = 3; 6 - 2 idle training wanted.
    assert len(decision.moves) == 3
    assert "inference p95 100 ms < 180 ms" in decision.reason
    assert "waiting 1 h (target 15 min)" in decision.reason


def test_slurms_expected_start_counts_as_waiting():
    later = queue(nodes=2, waited_s=60, expected_start=NOW + timedelta(hours=2))
    decision = decide(POLICY, snapshot(100, training=(later,)), fleet(0, 6), [], NOW)
    assert decision.rule == Rule.TRAINING_WAITING
    assert "by Slurm's expected start" in decision.reason


def test_a_short_wait_moves_nothing():
    state = snapshot(100, training=(queue(nodes=6, waited_s=300),))
    assert decide(POLICY, state, fleet(0, 6), [], NOW).rule == Rule.HOLD_BALANCED


def test_an_empty_training_queue_borrows_nothing_however_idle_inference_is():
    decision = decide(POLICY, snapshot(50), fleet(), [], NOW)
    assert decision.rule == Rule.HOLD_BALANCED
    assert "training queue empty" in decision.reason


def test_training_waits_while_the_inference_load_is_in_its_band():
    state = snapshot(220, training=(queue(nodes=6, waited_s=3600),))
    decision = decide(POLICY, state, fleet(0, 6), [], NOW)
    assert decision.rule == Rule.HOLD_INFERENCE_BUSY
    assert "but inference p95 220 ms is not below 180 ms" in decision.reason


def test_training_waits_until_the_low_load_has_lasted_the_hysteresis():
    state = snapshot(100, minutes=3, training=(queue(nodes=6, waited_s=3600),))
    assert decide(POLICY, state, fleet(0, 6), [], NOW).rule == Rule.HOLD_INFERENCE_BUSY


def test_idle_training_nodes_serve_the_queue_before_inference_lends_any():
    state = snapshot(100, training=(queue(nodes=2, waited_s=3600),))
    decision = decide(POLICY, state, fleet(training=3, inference=6), [], NOW)
    assert decision.rule == Rule.HOLD_UNDER_WAY
    assert "training has idle nodes for it" in decision.reason


def test_slurm_served_inference_lends_its_idle_nodes_when_nothing_waits_for_them():
    policy = replace(POLICY, signals=frozenset({Signal.TRAINING, Signal.INFERENCE_QUEUE}))
    served = InferenceQueue("infer", pending_jobs=0, pending_nodes=0, allocated_nodes=2, at=NOW)
    nodes = fleet(0, 4, infer_00={"busy": True}, infer_01={"busy": True})
    state = DemandSnapshot(training=(queue(nodes=4, waited_s=3600),), inference_queue=served)
    decision = decide(policy, state, nodes, [], NOW)
    assert moved(decision) == ["infer-02", "infer-03"]


# --- which nodes -------------------------------------------------------------------


def test_idle_nodes_go_first_then_busy_ones_by_when_their_jobs_end():
    nodes = fleet(
        training=4,
        inference=4,
        train_00={"busy": True, "jobs_end_by": NOW + timedelta(hours=5)},
        train_01={"busy": True, "jobs_end_by": NOW + timedelta(hours=1)},
        train_02={"busy": True, "jobs_end_by": None},
    )
    decision = decide(POLICY, snapshot(412), nodes, [], NOW)
    assert moved(decision) == ["train-03", "train-01", "train-00", "train-02"]
    assert [m.waits_for_jobs for m in decision.moves] == [False, True, True, True]
    assert not any(move.requeue for move in decision.moves)
    assert "1 idle, 3 moving when their jobs end" in decision.reason


def test_checkpointable_jobs_are_requeued_only_when_the_policy_allows_it():
    busy = {"busy": True, "checkpointable": True, "jobs_end_by": NOW + timedelta(hours=9)}
    other = {"busy": True, "jobs_end_by": NOW + timedelta(hours=1)}
    nodes = fleet(training=2, inference=4, train_00=busy, train_01=other)
    strict = decide(POLICY, snapshot(270), nodes, [], NOW)
    assert moved(strict) == ["train-01"] and not strict.moves[0].requeue
    allowing = replace(POLICY, allow_checkpoint_requeue=True)
    decision = decide(allowing, snapshot(270), nodes, [], NOW)
    assert moved(decision) == ["train-00"] and decision.moves[0].requeue
    assert "1 with checkpointable jobs to requeue" in decision.reason


def test_a_node_another_party_holds_is_never_moved():
    nodes = fleet(training=1, inference=4, train_00={"held_by": "admin alice: maintenance"})
    decision = decide(POLICY, snapshot(412), nodes, [], NOW)
    assert decision.rule == Rule.HOLD_NO_CANDIDATE
    assert "held by another party" in decision.reason


def test_a_node_in_its_cooldown_stays_put():
    recently = {"last_moved_at": NOW - timedelta(minutes=30)}
    nodes = fleet(training=2, inference=4, train_00=recently)
    assert moved(decide(POLICY, snapshot(270), nodes, [], NOW)) == ["train-01"]
    nodes = fleet(training=1, inference=4, train_00=recently)
    assert decide(POLICY, snapshot(270), nodes, [], NOW).rule == Rule.HOLD_NO_CANDIDATE
    cooled = {"last_moved_at": NOW - timedelta(minutes=61)}
    nodes = fleet(training=1, inference=4, train_00=cooled)
    assert moved(decide(POLICY, snapshot(270), nodes, [], NOW)) == ["train-00"]


def test_a_node_already_moving_is_not_chosen_again():
    nodes = fleet(training=2, inference=4, train_00={"moving_to": Pool.TRAINING})
    assert moved(decide(POLICY, snapshot(270), nodes, [], NOW)) == ["train-01"]


# --- limits ------------------------------------------------------------------------


def test_the_moves_per_hour_cap_bounds_a_decision_and_then_holds():
    policy = replace(POLICY, max_moves_per_hour=3)
    earlier = [RecentMove("x", Direction.TO_TRAINING, NOW - timedelta(minutes=70))]
    assert len(decide(policy, snapshot(412), fleet(8, 4), earlier, NOW).moves) == 3
    recent = [RecentMove(f"x{i}", Direction.TO_TRAINING, NOW - timedelta(minutes=50 + i))
              for i in range(2)]  # fmt: skip
    assert len(decide(policy, snapshot(412), fleet(8, 4), recent, NOW).moves) == 1
    recent.append(RecentMove("x3", Direction.TO_TRAINING, NOW - timedelta(minutes=1)))
    capped = decide(policy, snapshot(412), fleet(8, 4), recent, NOW)
    assert capped.rule == Rule.HOLD_MOVE_CAP
    assert "the cap of 3 moves an hour is reached" in capped.reason


def test_the_training_minimum_bounds_what_inference_takes():
    policy = replace(POLICY, training_min_nodes=3)
    assert len(decide(policy, snapshot(412), fleet(4, 4), [], NOW).moves) == 1
    held = decide(policy, snapshot(412), fleet(3, 4), [], NOW)
    assert held.rule == Rule.HOLD_POOL_LIMIT
    assert "training is at its minimum of 3 nodes" in held.reason


def test_the_inference_maximum_bounds_what_inference_takes():
    policy = replace(POLICY, inference_max_nodes=5)
    assert len(decide(policy, snapshot(412), fleet(4, 4), [], NOW).moves) == 1
    held = decide(policy, snapshot(412), fleet(4, 5), [], NOW)
    assert "inference is at its maximum of 5 nodes" in held.reason


def test_the_inference_minimum_bounds_what_training_borrows():
    policy = replace(POLICY, inference_min_nodes=5)
    state = snapshot(20, training=(queue(nodes=8, waited_s=3600),))
    decision = decide(policy, state, fleet(0, 6), [], NOW)
    assert len(decision.moves) == 1


def test_a_pool_under_its_minimum_is_refilled_first():
    policy = replace(POLICY, inference_min_nodes=6)
    decision = decide(policy, snapshot(200), fleet(4, 4), [], NOW)
    assert decision.rule == Rule.POOL_MINIMUM
    assert len(decision.moves) == 2
    assert "inference pool has 4 nodes, under its minimum of 6" in decision.reason


# --- missing and stale data ----------------------------------------------------------


def test_a_missing_signal_holds_and_says_why():
    state = DemandSnapshot(training=(queue(),), errors={"inference_load": "Prometheus: down"})
    decision = decide(POLICY, state, fleet(), [], NOW)
    assert decision.rule == Rule.HOLD_MISSING_SIGNAL and decision.holds
    assert decision.reason == "holding, no data: inference load: Prometheus: down"


def test_a_failed_source_holds_even_beside_an_older_reading():
    state = replace(snapshot(412), errors={"inference_load": "PromQL does not parse"})
    assert decide(POLICY, state, fleet(), [], NOW).rule == Rule.HOLD_MISSING_SIGNAL


def test_a_missing_training_queue_holds_too():
    state = DemandSnapshot(training=None, inference_load=load(412))
    decision = decide(POLICY, state, fleet(), [], NOW)
    assert "training queue: no reading" in decision.reason


def test_a_stale_signal_holds():
    old = tuple(Sample(s.value, s.at - timedelta(minutes=6)) for s in load(412))
    decision = decide(POLICY, replace(snapshot(), inference_load=old), fleet(), [], NOW)
    assert decision.rule == Rule.HOLD_STALE_SIGNAL
    assert "inference load last read 6 min ago (limit 5 min)" in decision.reason


def test_an_optional_signal_that_went_stale_holds_too():
    pods = KubernetesDemand(8, 4, 4, at=NOW - timedelta(hours=1))
    decision = decide(POLICY, snapshot(412, kubernetes=pods), fleet(), [], NOW)
    assert decision.rule == Rule.HOLD_STALE_SIGNAL


def test_an_old_training_reading_holds():
    state = snapshot(412, training=(queue(at=NOW - timedelta(minutes=10)),))
    assert decide(POLICY, state, fleet(), [], NOW).rule == Rule.HOLD_STALE_SIGNAL


def test_evidence_is_plain_json():
    import json

    decision = decide(POLICY, snapshot(412), fleet(), [], NOW)
    assert json.loads(json.dumps(decision.evidence))["moves"] == moved(decision)


def test_a_queue_length_target_is_worded_as_waiting_requests():
    policy = replace(POLICY, inference_unit=InferenceUnit.QUEUE_LENGTH, inference_target=20)
    decision = decide(policy, snapshot(30), fleet(), [], NOW)
    assert decision.reason.startswith("inference queue 30 waiting > target 20 waiting")


# --- validation --------------------------------------------------------------------


def test_the_default_policy_is_valid():
    assert validate(DEFAULT_POLICY) == {}
    assert DEFAULT_POLICY.mode == Mode.APPROVAL


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"training_min_nodes": 5, "training_max_nodes": 4}, "training_min_nodes"),
        ({"inference_min_nodes": 5, "inference_max_nodes": 2}, "inference_min_nodes"),
        ({"training_min_nodes": -1}, "training_min_nodes"),
        ({"inference_max_nodes": -1}, "inference_max_nodes"),
        ({"inference_target": 0}, "inference_target"),
        ({"inference_target": -300}, "inference_target"),
        ({"inference_target": float("nan")}, "inference_target"),
        ({"inference_unit": InferenceUnit.QUEUE_LENGTH, "inference_target": 0.5},
         "inference_target"),
        ({"inference_unit": "rps"}, "inference_unit"),
        ({"training_max_wait_s": 0}, "training_max_wait_s"),
        ({"hysteresis_s": -1}, "hysteresis_s"),
        ({"hysteresis_s": 90000}, "hysteresis_s"),
        ({"cooldown_s": -5}, "cooldown_s"),
        ({"max_moves_per_hour": 0}, "max_moves_per_hour"),
        ({"stale_after_s": 0}, "stale_after_s"),
        ({"mode": "sometimes"}, "mode"),
        ({"signals": frozenset()}, "signals"),
    ],
)  # fmt: skip
def test_an_impossible_policy_is_refused_with_the_field_named(changes, field):
    errors = validate(replace(DEFAULT_POLICY, **changes))
    assert list(errors) == [field]


def test_limits_the_pair_cannot_meet_are_refused():
    policy = replace(DEFAULT_POLICY, training_min_nodes=6, inference_min_nodes=5)
    assert "inference_min_nodes" in validate(policy, total_nodes=10)
    assert validate(policy, total_nodes=11) == {}
    policy = replace(DEFAULT_POLICY, training_max_nodes=4, inference_max_nodes=5)
    assert "training_max_nodes" in validate(policy, total_nodes=10)
    assert validate(policy, total_nodes=9) == {}


def test_a_policy_can_be_built_and_compared_as_a_value():
    assert Policy() == DEFAULT_POLICY
    with pytest.raises(AttributeError):
        DEFAULT_POLICY.cooldown_s = 0  # type: ignore[misc]
