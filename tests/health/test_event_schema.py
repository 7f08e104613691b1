"""The agent event schema through the API: what the agent sends is accepted, nothing else is."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agent.checks import ALL_CHECKS, CheckContext, CommandOutput, run_checks
from agent.events import XidEventBuilder, check_event, iso
from agent.parsers.kmsg import KmsgParser, TimeContext
from agent.schema import FIELD_NAMES
from clusters.models import Node
from health.models import HealthEvent, NodeToken

URL = "/api/v1/health/events/"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "health"
KMSG_LOGS = ["kmsg_syslog.log", "kmsg_journalctl.log", "kmsg_journalctl_iso.log",
             "kmsg_dmesg.log", "kmsg_dmesg_T.log", "kmsg_devkmsg.log"]  # fmt: skip
# What nvidia-smi and dcgmi answer on each simulated node, by fixture file (None: missing).
NODES = {
    "healthy": ("nvsmi_h100_healthy.xml", "dcgmi_health_healthy.txt"),
    "double-bit ECC": ("nvsmi_h100_dbe_remap_pending.xml", "dcgmi_health_failure_dbe.txt"),
    "old driver, DCGM warning": ("nvsmi_a100_old_driver.xml", "dcgmi_health_warning.txt"),
    "no GPU tools": (None, None),
}


@pytest.fixture
def agent(synced):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {NodeToken.issue(node())[1]}")
    return client


def node() -> Node:
    return Node.objects.get(name="gpu-02")


def post(client, events):
    return client.post(URL, {"node": "gpu-02", "events": events}, format="json")


def xid_event(**extra):
    return {"id": "e1", "kind": "xid", "observed_at": timezone.now().isoformat(), "xid": 79,
            "pci": "0000:5d:00", "message": "GPU has fallen off the bus.", **extra}  # fmt: skip


def kernel_log_events(name: str) -> list[dict]:
    """The events the agent builds from a kernel log, as its `parse` command prints them."""
    parser = KmsgParser(TimeContext(boot_time=datetime(2026, 11, 29, 9, 44, 20, tzinfo=UTC)))
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    events = XidEventBuilder("gpu-02").build([r for line in lines for r in parser.feed(line)])
    for event in events:
        # The fixtures are dated; the server only takes the last 30 days.
        event["observed_at"] = iso(timezone.now())
    return events


def check_events(tmp_path, nvsmi: str | None, dcgmi: str | None) -> list[dict]:
    """Every check's event on a node whose nvidia-smi and dcgmi give these answers."""
    answers = {
        "nvidia-smi": CommandOutput(0, (FIXTURES / nvsmi).read_text()) if nvsmi else None,
        "dcgmi": CommandOutput(0, (FIXTURES / dcgmi).read_text()) if dcgmi else None,
    }
    ctx = CheckContext(
        sysfs_root=tmp_path / "sys",
        proc_root=tmp_path / "proc",
        run=lambda argv, timeout_s, env=None: answers[Path(argv[0]).name],
        config={"expected_gpus": 2, "cpu_stress": {"seconds": 0.05, "workers": 1}},
        env={},
        which=lambda name: f"/usr/bin/{name}" if answers.get(name) else None,
    )
    return [check_event(result) for result in run_checks(list(ALL_CHECKS.values()), ctx)]


def test_an_event_with_an_unknown_key_is_refused_with_a_400_naming_the_key(agent):
    response = post(agent, [xid_event(gpu_serial="1650924060001")])

    assert response.status_code == 400
    assert "gpu_serial" in response.json()["errors"]["events[0].gpu_serial"][0]
    assert not HealthEvent.objects.exists()


def test_a_batch_with_one_unknown_key_stores_none_of_its_events(agent):
    response = post(agent, [xid_event(id="a"), xid_event(id="b", severity="critical")])

    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["events[1].severity"]
    assert not HealthEvent.objects.exists()


@pytest.mark.parametrize("name", KMSG_LOGS)
def test_every_xid_event_the_agent_builds_from_a_kernel_log_is_accepted(agent, name):
    events = kernel_log_events(name)

    response = post(agent, events)

    assert response.status_code == 201, response.json()
    assert response.json()["accepted"] == len(events)


def test_the_mig_instance_and_process_an_xid_names_are_stored(agent):
    (mig,) = [e for e in kernel_log_events("kmsg_syslog.log") if e["gpu_instance"] is not None]

    assert post(agent, [mig]).status_code == 201
    stored = HealthEvent.objects.get()
    assert (stored.data["gpu_instance"], stored.data["pid"]) == (mig["gpu_instance"], mig["pid"])


@pytest.mark.parametrize("answers", NODES.values(), ids=NODES.keys())
def test_every_check_result_the_agent_sends_is_accepted(agent, tmp_path, answers):
    events = check_events(tmp_path, *answers)

    response = post(agent, events)

    assert response.status_code == 201, response.json()
    assert response.json()["accepted"] == len(events) == len(ALL_CHECKS)


def test_the_api_docs_describe_every_field_of_the_schema(researcher):
    client = APIClient()
    client.force_authenticate(researcher)

    schema = client.get("/api/v1/schema/", {"format": "json"}).json()

    documented = schema["components"]["schemas"]["AgentEvent"]["properties"]
    assert tuple(documented) == FIELD_NAMES
    assert {"gpu_instance", "compute_instance", "pid", "process"} <= set(documented)
    assert all(field.get("description") for field in documented.values())
