"""The agent event schema itself: the agent builds from it and it refuses what it lacks."""

import ast
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent import events as agent_events
from agent import schema
from agent.checks import CheckResult, CheckStatus
from agent.parsers.kmsg import KmsgParser

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LINE = ("Nov 29 10:01:02 gpu-07 kernel: NVRM: Xid (PCI:0000:38:00): 13, pid=1, name=p, Ch 1\n"
        "Nov 29 10:01:03 gpu-07 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=7194, "
        "name=python, Ch 00000008, GPU Instance 5, Compute Instance 1\n")  # fmt: skip


def agent_events_of_every_kind() -> list[dict]:
    parser = KmsgParser()
    records = [r for line in LINE.splitlines(keepends=True) for r in parser.feed(line)]
    xids = agent_events.XidEventBuilder("gpu-07").build(records)
    checks = [agent_events.check_event(CheckResult("ecc_remap", s, "m")) for s in CheckStatus]
    return [*xids, *checks]


def valid(**changes) -> dict:
    facts = {"id": "e1", "kind": "check", "observed_at": NOW.isoformat(), "check": "memory",
             "status": "pass"}  # fmt: skip
    return schema.event(**{**facts, **changes})


def errors_of(raw) -> dict[str, list[str]]:
    return schema.validate_event(raw, now=NOW)[1]


def test_the_agent_sends_exactly_the_schemas_fields():
    emitted = agent_events_of_every_kind()

    assert len(emitted) == 2 + len(CheckStatus)
    assert all(tuple(event) == schema.FIELD_NAMES for event in emitted)
    now = datetime.now(UTC)
    checks = [event for event in emitted if event["kind"] == "check"]
    assert [schema.validate_event(event, now=now)[1] for event in checks] == [{}] * len(checks)


def test_the_agent_events_module_keeps_no_key_list_of_its_own():
    # Its keys are keyword arguments to schema.event(): a field named as a string here
    # would be a second definition of the event that could drift from the schema.
    tree = ast.parse(Path(agent_events.__file__).read_text())
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    assert strings & set(schema.FIELD_NAMES) == set()


def test_building_an_event_with_an_unknown_field_is_a_bug_caught_at_once():
    with pytest.raises(TypeError, match="gpu_serial"):
        schema.event(id="e1", gpu_serial="1650924060001")


def test_an_unknown_key_is_refused_by_name():
    errors = errors_of({**valid(), "gpu_serial": "1650924060001"})

    assert list(errors) == ["gpu_serial"]
    assert errors["gpu_serial"][0].startswith("Unknown field 'gpu_serial'")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"id": None}, "id", "This field is required."),
        ({"id": "a b"}, "id", "Use 1-128 letters, digits, '.', '_', ':' or '-'."),
        ({"kind": "smoke"}, "kind", "Must be one of xid, check, nvml, dcgm."),
        ({"status": "ok"}, "status", "Must be one of pass, warn, fail, skip or null."),
        ({"pid": 2**31 + 1}, "pid", f"Must be between 0 and {2**31}."),
        ({"gpu_instance": True}, "gpu_instance", "Must be an integer or null."),
        ({"process": "x" * 257}, "process", "At most 256 characters."),
        ({"message": "a\x00b"}, "message", "Must not contain NUL characters."),
        ({"pci": "3b:00.0"}, "pci", "Must look like 0000:3b:00 (domain:bus:device)."),
        ({"data": [1]}, "data", "Must be a JSON object."),
        ({"check": None}, "check", "A check event needs the check's name."),
        ({"kind": "xid"}, "xid", "An xid event needs an integer xid."),
        ({"observed_at": "2026-12-01T12:00:00"}, "observed_at",
         "An ISO-8601 timestamp with a time zone is required."),
        ({"observed_at": (NOW + timedelta(minutes=6)).isoformat()}, "observed_at",
         "Is in the future; check the node's clock."),
        ({"observed_at": (NOW - timedelta(days=31)).isoformat()}, "observed_at",
         "Is more than 30 days old."),
    ],
)  # fmt: skip
def test_each_rule_refuses_with_its_own_message(changes, field, message):
    assert errors_of(valid(**changes)) == {field: [message]}


def test_a_clean_event_has_every_field_the_pci_lowercased_and_a_moment_for_its_time():
    clean, errors = schema.validate_event(valid(pci="0000:3B:00", data=None), now=NOW)

    assert errors == {}
    assert tuple(clean) == schema.FIELD_NAMES
    assert (clean["pci"], clean["data"], clean["observed_at"]) == ("0000:3b:00", {}, NOW)


@pytest.mark.parametrize(
    "text",
    ["2026-12-01T12:00:00+00:00", "2026-12-01T12:00:00Z", "2026-12-1T12:0:00+00:00",
     "2026-12-01 12:00:00.0000001 +0000", "2026-12-01T13:00+01"],
)  # fmt: skip
def test_timestamps_are_read_as_the_server_always_read_them(text):
    assert schema.parse_timestamp(text) == NOW


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01T12:00:00Z", "2026-12-01"])
def test_what_is_not_a_moment_gives_no_timestamp(text):
    moment = schema.parse_timestamp(text)
    assert moment is None or moment.tzinfo is None


def test_the_schema_imports_nothing_from_django():
    code = "import sys, agent.schema; print(sorted(m for m in sys.modules if 'django' in m))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
