"""A small world of real objects for the security suite, and a client per role."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest


@pytest.fixture(autouse=True)
def fast_passwords_and_a_private_cache(settings):
    # Users are created for every matrix row; the production hasher would
    # spend most of the suite's time hashing the same password.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Login throttling counts in the cache: a key prefix per test starts it at
    # zero without flushing a Redis that others may share.
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


@dataclass
class World:
    """One of each object the URLs take as a parameter, owned by the researcher."""

    users: dict
    node: object
    job: object
    template: object
    remediation: object
    policy: object
    node_content_type: object
    demand_policy: object


@pytest.fixture
def world(researcher, other_researcher, manager, admin_user, synced, cluster) -> World:
    from django.contrib.contenttypes.models import ContentType
    from django.utils import timezone

    from clusters.models import Node
    from health.models import HealthEvent, Incident
    from jobs.models import Job, JobTemplate
    from remediation.models import (
        BreakerTrip,
        Policy,
        Remediation,
        RemediationStep,
    )
    from remediation.plans import plan_for

    now = timezone.now()
    node = Node.objects.order_by("name").first()
    job = Job.objects.create(
        cluster=cluster,
        slurm_id=424242,
        name="matrix-job",
        user="alice",
        partition="train",
        state="RUNNING",
        submitted_by=researcher,
        node_count=1,
        gpus=8,
        submit_at=now - timedelta(minutes=5),
        start_at=now - timedelta(minutes=4),
    )
    job.nodes.add(node)
    incident = Incident.objects.create(
        node=node, gpu_index=0, opened_at=now, last_event_at=now, severity="critical", xids=[79]
    )
    HealthEvent.objects.create(
        node=node,
        incident=incident,
        kind="xid",
        xid=79,
        gpu_index=0,
        severity="critical",
        message="GPU has fallen off the bus",
        observed_at=now,
        last_observed_at=now,
        fold_key="matrix",
    )
    remediation = Remediation.objects.create(
        node=node,
        action="reboot",
        trigger="health_event",
        status="awaiting_approval",
        reason="XID 79 on GPU 0",
        planned_steps=plan_for("reboot"),
        incident=incident,
    )
    RemediationStep.objects.create(
        remediation=remediation,
        index=0,
        name="drain",
        outcome="succeeded",
        started_at=now - timedelta(seconds=30),
        finished_at=now - timedelta(seconds=20),
    )
    BreakerTrip.objects.create(cluster=cluster, partition="train", reason="matrix", closed_at=now)
    return World(
        users={
            "researcher": researcher,
            "other_researcher": other_researcher,
            "manager": manager,
            "admin": admin_user,
        },
        node=node,
        job=job,
        template=JobTemplate.objects.create(owner=researcher, name="matrix", params={}),
        remediation=remediation,
        policy=Policy.objects.create(xid=79, action="reboot", mode="approval"),
        node_content_type=ContentType.objects.get_for_model(Node),
        demand_policy=_demand_policy(cluster, admin_user),
    )


def _demand_policy(cluster, admin_user):
    from clusters.models import NodePool
    from demand.models import ReallocationPolicy
    from demand.policies import save_policy

    policy = ReallocationPolicy(
        cluster=cluster,
        training_pool=NodePool.objects.get(cluster=cluster, kind="training"),
        inference_pool=NodePool.objects.get(cluster=cluster, kind="inference"),
    )
    return save_policy(policy, user=admin_user)


def client_for(world: World, role: str, **kwargs):
    from django.test import Client

    client = Client(raise_request_exception=False, **kwargs)
    if role != "anonymous":
        client.force_login(world.users[role])
    return client
