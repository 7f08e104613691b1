from datetime import UTC, datetime, timedelta, timezone

import pytest

from agent.parsers.kmsg import gpu_uuids, parse_gpu_uuid, parse_line, parse_lines, parse_records

BOOT = datetime(2026, 11, 29, 9, 0, 0, tzinfo=UTC)
AT_10_01_02 = datetime(2026, 11, 29, 10, 1, 2, tzinfo=UTC)
BODY = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


@pytest.mark.parametrize(
    ("line", "observed_at"),
    [
        (f"Nov 29 10:01:02 gpu-01 kernel: {BODY}", AT_10_01_02),
        (f"Nov 29 10:01:02.250000 gpu-01 kernel: {BODY}", AT_10_01_02 + timedelta(seconds=0.25)),
        (f"Nov 29 10:01:02 gpu-01 kernel: [ 3662.000000] {BODY}", AT_10_01_02),
        (f"2026-11-29T10:01:02+0000 gpu-01 kernel: {BODY}", AT_10_01_02),
        (f"2026-11-29T11:01:02+01:00 gpu-01 kernel: {BODY}", AT_10_01_02),
        (f"2026-11-29T10:01:02.000000+00:00 gpu-01 kernel: {BODY}", AT_10_01_02),
        (f"[ 3662.000000] {BODY}", AT_10_01_02),
        (f"[Sun Nov 29 10:01:02 2026] {BODY}", AT_10_01_02),
        (f"[Sun Nov  1 10:01:02 2026] {BODY}", datetime(2026, 11, 1, 10, 1, 2, tzinfo=UTC)),
        (f"4,1234,3662000000,-;{BODY}", AT_10_01_02),
        (f"4,1234,3662000000,-,caller=T12;{BODY}", AT_10_01_02),
        (f"kern  :err   : [ 3662.000000] {BODY}", AT_10_01_02),
    ],
)
def test_it_reads_the_timestamp_of_every_log_format(line, observed_at):
    record = parse_line(line, boot_time=BOOT, year=2026)
    assert (record.xid, record.pci, record.observed_at) == (79, "0000:3b:00", observed_at)
    assert record.message == "GPU has fallen off the bus."


def test_relative_stamps_without_a_boot_time_have_no_time():
    assert parse_line(f"[ 3662.000000] {BODY}").observed_at is None


def test_syslog_lines_use_the_given_zone_when_they_have_none():
    tz = timezone(timedelta(hours=2))
    record = parse_line(f"Nov 29 10:01:02 gpu-01 kernel: {BODY}", year=2026, tz=tz)
    assert record.observed_at == AT_10_01_02 - timedelta(hours=2)


def test_syslog_lines_without_a_year_from_the_future_belong_to_last_year():
    tomorrow = datetime.now(UTC) + timedelta(days=3)
    line = f"{tomorrow:%b %d %H:%M:%S} gpu-01 kernel: {BODY}"
    assert parse_line(line).observed_at.year == tomorrow.year - 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "NVRM: Xid (PCI:0000:38:00): 43, pid=2911042, name=pt_main_thread, Ch 00000008",
            {
                "xid": 43,
                "pid": 2911042,
                "process": "pt_main_thread",
                "channel": 8,
                "message": "Ch 00000008",
            },
        ),
        (
            "NVRM: Xid (PCI:0000:55:00): 48, pid=2187001, name=python, channel 0x00000002",
            {"xid": 48, "pid": 2187001, "process": "python", "channel": 2},
        ),
        (
            "NVRM: Xid (PCI:0000:CA:00.0): 31, pid=1587211, name=python, Ch 0000000a, intr "
            "00000000. MMU Fault: ENGINE GRAPHICS GPC5 GPCCLIENT_T1_5 faulted @ 0x2ae1_d6600000",
            {"xid": 31, "pci": "0000:ca:00", "channel": 10, "process": "python"},
        ),
        (
            "NVRM: Xid (0000:03:00): 14, Channel 00000001",
            {"xid": 14, "pci": "0000:03:00", "pid": None, "process": None, "channel": 1},
        ),
        (
            "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
            "Exception on (GPC 9, TPC 2, SM 0): Out Of Range Address",
            {
                "xid": 13,
                "pid": None,
                "process": None,
                "channel": None,
                "message": (
                    "Graphics SM Warp Exception on (GPC 9, TPC 2, SM 0): Out Of Range Address"
                ),
            },
        ),
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
            "(0x9). RST: No, D-RST: No",
            {
                "xid": 94,
                "gpu_instance": 5,
                "compute_instance": None,
                "pid": 7194,
                "process": None,
                "channel": None,
                "reset_required": False,
                "drain_and_reset": False,
            },
        ),
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:1): 95, pid=7194, name=python, "
            "Uncontained: FBHUB. RST: Yes, D-RST: Yes",
            {
                "xid": 95,
                "gpu_instance": 5,
                "compute_instance": 1,
                "reset_required": True,
                "drain_and_reset": True,
            },
        ),
        (
            "NVRM: Xid (PCI:0000:55:00): 154, GPU recovery action changed from 0x0 (None) "
            "to 0x4 (Drain and Reset)",
            {"xid": 154, "recovery_from": 0, "recovery_to": 4, "pid": None},
        ),
        (
            "NVRM: Xid (PCI:0000:55:00): 154, GPU recovery action changed from 0x1 "
            "(GPU Reset Required) to 0x2 (Node Reboot Required)",
            {"xid": 154, "recovery_from": 1, "recovery_to": 2},
        ),
        (
            "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
            "waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) "
            "(0x2081 0x4).",
            {"xid": 119, "process": "nvidia-smi", "pci": "0000:9b:00"},
        ),
        (
            "NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 "
            "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            {
                "xid": 149,
                "pci": "0008:01:00",
                "nvlink_unit": "NETIR_LINK_EVT",
                "nvlink_fatal": True,
                "nvlink_link": 8,
            },
        ),
        (
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC1 i0 Link 17 (0x00000000 "
            "0x00000010 0x00000000 0x00000000)",
            {"xid": 145, "nvlink_unit": "RLW_REMAP", "nvlink_fatal": False, "nvlink_link": 17},
        ),
        (
            "NVRM: Xid (PCI:0000:55:00): 63, pid=2187001, name=python, Row Remapper: New row "
            "(0x0000000e9b9107e0) marked for remapping, reset gpu to activate.",
            {"xid": 63, "channel": None},
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            {"xid": 79, "pid": None, "message": "GPU has fallen off the bus.", "implied": False},
        ),
        (
            "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
            {"xid": 79, "pci": "0000:18:00", "implied": True},
        ),
        (
            "NVRM: The NVIDIA GPU 0000:18:00.0 (PCI ID: 10de:20b2) installed in this system has "
            "fallen off the bus and is not responding to commands.",
            {"xid": 79, "pci": "0000:18:00", "implied": True},
        ),
    ],
)
def test_it_parses_every_xid_line_variant(body, expected):
    record = parse_line(f"Nov 29 10:01:02 gpu-01 kernel: {body}", year=2026)
    for name, value in expected.items():
        assert getattr(record, name) == value, name


@pytest.mark.parametrize(
    "line",
    [
        "Nov 29 10:01:02 gpu-01 kernel: eth0: link up",
        "Nov 29 10:01:02 gpu-01 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124",
        "Nov 29 10:01:02 gpu-01 kernel: NVRM: GPU Board Serial Number: 1652823012399",
        " SUBSYSTEM=pci",
        "",
    ],
)
def test_lines_without_an_xid_give_no_record(line):
    assert parse_line(line) is None


def test_it_maps_pci_addresses_to_gpu_uuids():
    line = "[ 12.5] NVRM: GPU at PCI:0000:9B:00: GPU-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"
    record = parse_gpu_uuid(line)
    assert (record.pci, record.uuid) == ("0000:9b:00", "GPU-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab")
    assert gpu_uuids([line]) == {"0000:9b:00": "GPU-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"}


def test_it_joins_the_multi_line_fallen_off_the_bus_report():
    lines = [
        "[ 99.3] NVRM: The NVIDIA GPU 0000:18:00.0",
        "[ 99.3] NVRM: (PCI ID: 10de:20b2) installed in this system has",
        "[ 99.3] NVRM: fallen off the bus and is not responding to commands.",
        "[ 99.4] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen",
    ]
    records = parse_lines(lines, boot_time=BOOT)
    assert [(r.xid, r.pci, r.implied) for r in records] == [
        (79, "0000:18:00", True),
        (79, "0000:18:00", False),
    ]
    assert "not responding to commands" in records[0].message
    assert records[0].raw.count("\n") == 2
    assert records[0].observed_at == BOOT + timedelta(seconds=99.3)


def test_an_unfinished_fallen_report_does_not_swallow_the_next_xid():
    lines = [
        "NVRM: The NVIDIA GPU 0000:18:00.0",
        "NVRM: something else",
        "NVRM: Xid (PCI:0000:55:00): 48, pid=1, name=python, channel 0x00000002",
    ]
    assert [r.xid for r in parse_lines(lines)] == [48]


@pytest.mark.parametrize(
    "name",
    ["kmsg_syslog.log", "kmsg_journalctl.log", "kmsg_journalctl_iso.log", "kmsg_dmesg.log",
     "kmsg_dmesg_T.log", "kmsg_devkmsg.log"],
)  # fmt: skip
def test_it_parses_a_whole_burst_in_each_format(fixtures, name):
    lines = (fixtures / name).read_text().splitlines()
    # 1000 s after this boot is 10:01:00, matching the wall-clock formats.
    boot = datetime(2026, 11, 29, 9, 44, 20, tzinfo=UTC)
    records = parse_records(lines, boot_time=boot, year=2026)
    xids = [r for r in records if hasattr(r, "xid")]
    assert [r.xid for r in xids] == [48, 63, 154, 13, 43, 94, 79, 79]
    assert [r.implied for r in xids][-2:] == [False, True]
    assert xids[0].observed_at.replace(microsecond=0) == datetime(
        2026, 11, 29, 10, 1, 0, tzinfo=UTC
    )
    assert all(r.observed_at.tzinfo is not None for r in xids)
    assert {r.pci for r in records if not hasattr(r, "xid")} == {"0000:55:00"}
