from agent.parsers.dcgm import HealthStatus, parse_diag, parse_health


def test_a_healthy_report_has_no_entities(fixtures):
    report = parse_health((fixtures / "dcgmi_health_healthy.txt").read_text())
    assert report.overall == HealthStatus.HEALTHY
    assert report.entities == []


def test_a_dbe_failure_names_the_gpu_system_and_message(fixtures):
    report = parse_health((fixtures / "dcgmi_health_failure_dbe.txt").read_text())
    assert report.overall == HealthStatus.FAILURE
    (gpu,) = report.entities
    assert (gpu.group, gpu.entity_id, gpu.status) == ("GPU", "1", HealthStatus.FAILURE)
    (system,) = gpu.systems
    assert system.system == "Memory system"
    assert system.messages == ["Detected 1 volatile double-bit ECC error(s) in GPU 1."]


def test_wrapped_warning_messages_are_glued_back_together(fixtures):
    report = parse_health((fixtures / "dcgmi_health_warning.txt").read_text())
    assert report.overall == HealthStatus.WARNING
    assert [e.entity_id for e in report.entities] == ["0", "3"]
    pcie = report.entities[0].systems[0]
    assert pcie.system == "PCIe system"
    assert pcie.messages == [
        "Detected more than 16 PCIe replays per minute for GPU 0 : 23 Reconnect PCIe card. "
        "Run system side PCIE diagnostic utilities to verify hops off the GPU board. "
        "If issue is on the board, run the field diagnostic."
    ]
    assert report.entities[1].systems[0].messages == [
        "Clocks were throttled for 1200 ms due to a thermal violation for GPU 3."
    ]


def test_garbage_gives_no_verdict():
    assert parse_health("Error: unable to connect to host engine").overall is None


DIAG = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| Persistence Mode          | Warn                                           |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Fail - GPU: 1                                  |
| PCIe                      | Skip                                           |
+---------------------------+------------------------------------------------+
"""


def test_it_reads_each_diag_test_result():
    tests = parse_diag(DIAG)
    assert [(t.name, t.result) for t in tests] == [
        ("Denylist", "pass"), ("NVML Library", "pass"), ("Persistence Mode", "warn"),
        ("GPU Memory", "fail"), ("PCIe", "skip"),
    ]  # fmt: skip
    assert tests[3].detail == "GPU: 1"
