"""Hostlists and durations, read in one place by the Slurm parsers, the simulator
and medbay-launch on compute nodes."""

import pytest

from clusters.backends.slurm_syntax import duration_minutes, expand_hostlist


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("gpu-01", ["gpu-01"]),
        ("gpu-[01-02,05]", ["gpu-01", "gpu-02", "gpu-05"]),
        ("gpu-[01,03]", ["gpu-01", "gpu-03"]),
        ("tx-[01-04]", ["tx-01", "tx-02", "tx-03", "tx-04"]),
        ("node[8-11]", ["node8", "node9", "node10", "node11"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),
        ("gpu-[001-002]", ["gpu-001", "gpu-002"]),
        ("a[1-2],b3,c[5]", ["a1", "a2", "b3", "c5"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("gpu-[01-02],cpu-[1,3]", ["gpu-01", "gpu-02", "cpu-1", "cpu-3"]),
        ("", []),
    ],
)
def test_hostlists_expand_like_scontrol_show_hostnames(expression, hosts):
    assert expand_hostlist(expression) == tuple(hosts)


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        ("30", 30),
        ("10:30", 10),  # minutes:seconds
        ("01:30:00", 90),
        ("2-03", 2 * 24 * 60 + 3 * 60),
        ("2-03:30", 2 * 24 * 60 + 3 * 60 + 30),
        ("2-03:30:00", 2 * 24 * 60 + 3 * 60 + 30),
        (" 00:10:00 ", 10),
        ("UNLIMITED", None),
        ("", None),
        (None, None),
    ],
)
def test_durations_read_as_minutes_in_every_form_sbatch_accepts(value, minutes):
    assert duration_minutes(value) == minutes
