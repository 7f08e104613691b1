"""The queue's PrivateData, read from the real controller's configuration."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]


def test_private_data_is_what_scontrol_show_config_says(slurm):
    printed = subprocess.run(
        ["scontrol", "show", "config"],
        capture_output=True, text=True, check=True, timeout=30,
        env={**os.environ, "SLURM_CONF": slurm.slurm_conf},
    ).stdout  # fmt: skip
    line = re.search(r"^PrivateData\s*=\s*(\S*)\s*$", printed, re.M).group(1)
    expected = set() if line == "none" else set(line.split(","))

    kinds = slurm.private_data()

    assert isinstance(kinds, frozenset)
    assert kinds == expected
