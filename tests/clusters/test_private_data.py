"""Reading PrivateData out of `scontrol show config`."""

from __future__ import annotations

from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import CommandResult
from clusters.backends.slurm_parsers import PRIVATE_DATA_KINDS, parse_private_data

CONFIG = """Configuration data as of 2026-12-01T15:10:12
JobCredentialPrivateKey = (null)
PreemptType             = preempt/none
PrivateData             = {value}
ProctrackType           = proctrack/linuxproc
"""


def test_none_means_nothing_is_private():
    assert parse_private_data(CONFIG.format(value="none")) == frozenset()


def test_the_listed_kinds_are_private():
    assert parse_private_data(CONFIG.format(value="jobs,usage")) == {"jobs", "usage"}


def test_all_means_every_kind():
    assert parse_private_data(CONFIG.format(value="all")) == PRIVATE_DATA_KINDS


def test_a_config_without_the_line_hides_nothing():
    assert parse_private_data("SlurmctldPort = 6817\n") == frozenset()


def test_the_backend_asks_scontrol_show_config():
    calls = []

    def runner(args, *, input_text=None, timeout=None, env=None):
        calls.append(list(args))
        return CommandResult(tuple(args), 0, CONFIG.format(value="accounts,jobs"), "")

    assert SlurmBackend(runner=runner).private_data() == {"accounts", "jobs"}
    assert calls == [["scontrol", "show", "config"]]
