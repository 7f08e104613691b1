"""Reallocation policies: validating and saving them with their history, and their rules.

A policy row is the page's; `as_rules` turns it into the plain `demand.rules.Policy` the
decision, the replay and the benchmark all read, so a value means the same everywhere.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from clusters.models import Node
from core.audited import save_audited
from core.roles import is_admin
from demand import rules
from demand.models import ReallocationPolicy, ReallocationPolicyChange


class PolicyInvalid(Exception):
    """The policy's impossible values, every one of them, by field name."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field}: {error}" for field, error in errors.items()))
        self.errors = errors


def as_rules(policy: ReallocationPolicy) -> rules.Policy:
    return rules.Policy(
        training_min_nodes=policy.training_min_nodes,
        training_max_nodes=policy.training_max_nodes,
        inference_min_nodes=policy.inference_min_nodes,
        inference_max_nodes=policy.inference_max_nodes,
        inference_target=float(policy.inference_target),
        inference_unit=_member(rules.InferenceUnit, policy.inference_unit),
        training_max_wait_s=policy.training_max_wait_s,
        hysteresis_s=policy.hysteresis_s,
        cooldown_s=policy.cooldown_s,
        max_moves_per_hour=policy.max_moves_per_hour,
        allow_checkpoint_requeue=policy.allow_checkpoint_requeue,
        mode=_member(rules.Mode, policy.mode),
        stale_after_s=policy.stale_after_s,
        signals=frozenset(_member(rules.Signal, name) for name in policy.signals or ()),
    )


def _member(enum, value):
    """The enum member, or the raw value for `rules.validate` to name as wrong."""
    try:
        return enum(value)
    except ValueError:
        return value


def pair_size(policy: ReallocationPolicy) -> int:
    """How many nodes the policy's two pools hold now."""
    pools = [pk for pk in (policy.training_pool_id, policy.inference_pool_id) if pk]
    return Node.objects.filter(pool_id__in=pools).count()


def validate(policy: ReallocationPolicy) -> dict[str, str]:
    """Everything wrong with the policy, by field: the rules' checks of its limits and
    targets against the pair's nodes, and that its pools are a training and an inference
    pool of its own cluster."""
    errors = dict(rules.validate(as_rules(policy), pair_size(policy)))
    for field, kind in (("training_pool", "training"), ("inference_pool", "inference")):
        pool = getattr(policy, field, None) if getattr(policy, f"{field}_id") else None
        if pool is None:
            errors.setdefault(field, "choose a pool")
        elif pool.kind != kind:
            errors.setdefault(field, f"{pool.name} is a {pool.kind} pool, not a {kind} one")
        elif pool.cluster_id != policy.cluster_id:
            errors.setdefault(field, f"{pool.name} belongs to another cluster")
    return errors


def save_policy(policy: ReallocationPolicy, *, user) -> ReallocationPolicy:
    """Create or change a policy, refusing impossible values (all of them at once, by
    field), and record who changed what, from what, and when."""
    if not is_admin(user):
        raise PermissionDenied("Only admins may change reallocation policies.")
    errors = validate(policy)
    if errors:
        raise PolicyInvalid(errors)
    return save_audited(
        policy,
        user=user,
        record_change=lambda before, after: ReallocationPolicyChange.objects.create(
            policy=policy,
            before=before,
            after=after,
            changed_by=user,
            changed_at=policy.updated_at,
        ),
    )
