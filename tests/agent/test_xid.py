import pytest

from agent import xid
from agent.xid import Rung, Severity, escalate, lookup

TABLE_CODES = [8, 13, 31, 32, 38, 43, 45, 46, 48, 56, 57, 61, 62, 63, 64, 68, 69, 73, 74, 79,
               81, 92, 94, 95, 109, 110, 119, 120, 121, 122, 123, 124, 136, 137, 140, 143,
               144, 145, 146, 147, 148, 149, 150, 154, 155, 156, 157, 158]  # fmt: skip
LADDER_CODES = [8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82,
                83, 84, 85, 86, 88, 89, 94, *range(96, 106), *range(126, 136), 139, 14, 37, 38,
                43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 157, 46, 48, 62, 64,
                95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 79, 151, 54, 74, 45,
                78]  # fmt: skip


@pytest.mark.parametrize("code", sorted(set(TABLE_CODES + LADDER_CODES)))
def test_every_reference_code_is_in_the_catalogue(code):
    info = xid.CATALOGUE[code]
    assert info.code == code
    assert info.name and info.meaning
    assert isinstance(info.severity, Severity) and isinstance(info.rung, Rung)


def test_it_returns_an_unknown_entry_instead_of_raising():
    info = lookup(999)
    assert info.name == "unknown XID 999"
    assert (info.severity, info.rung, info.known) == (Severity.WARNING, Rung.NOTIFY, False)


@pytest.mark.parametrize("code", [13, 31, 43, 45, 137])
def test_application_xids_never_default_to_replace(code):
    assert lookup(code).rung not in (Rung.REPLACE, Rung.REBOOT, Rung.RESET_GPU)


def test_xid_79_defaults_to_a_critical_reboot_because_it_cannot_be_reset():
    assert (lookup(79).rung, lookup(79).severity) == (Rung.REBOOT, Severity.CRITICAL)


@pytest.mark.parametrize("code", [48, 64, 95, 119, 120, 140, 46, 62, 109, 110, 136, 143, 158])
def test_reset_bucket_codes_default_to_reset_gpu(code):
    assert lookup(code).rung == Rung.RESET_GPU


@pytest.mark.parametrize(
    ("code", "kwargs", "expected"),
    [
        (48, {}, Rung.REPLACE),
        (48, {"with_codes": {63}}, Rung.RESET_GPU),
        (48, {"with_codes": {64, 154}}, Rung.RESET_GPU),
        (64, {}, Rung.RESET_GPU),
        (64, {"repeats": 2}, Rung.REPLACE),
        (95, {"mig_enabled": True}, Rung.RESET_GPU),
        (95, {"mig_enabled": False}, Rung.REBOOT),
        (95, {"repeats": 3}, Rung.REPLACE),
        (74, {}, Rung.RESET_GPU),
        (74, {"repeats": 2}, Rung.REPLACE),
        (119, {}, Rung.RESET_GPU),
        (119, {"repeats": 2}, Rung.REBOOT),
        (119, {"persistent": True}, Rung.REPLACE),
        (120, {"persistent": True}, Rung.REPLACE),
        (140, {}, Rung.RESET_GPU),
        (140, {"repeats": 2}, Rung.REPLACE),
        (45, {}, Rung.NOTIFY),
        (45, {"with_codes": {45}}, Rung.NOTIFY),
        (45, {"with_codes": {48}}, Rung.IGNORE),
        (79, {}, Rung.REBOOT),
        (79, {"repeats": 2}, Rung.REPLACE),
        (13, {"repeats": 50}, Rung.RESTART_APP),
        (999, {"repeats": 5}, Rung.NOTIFY),
    ],
)
def test_escalation_follows_the_reference_rules(code, kwargs, expected):
    assert escalate(code, **kwargs) == expected


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (0, Rung.IGNORE),
        (1, Rung.RESET_GPU),
        (2, Rung.REBOOT),
        (3, Rung.NOTIFY),
        (4, Rung.RESET_GPU),
    ],
)
def test_xid_154_target_action_maps_to_a_rung(action, expected):
    assert xid.rung_for_recovery_action(action) == expected


def test_strongest_picks_the_most_drastic_rung():
    assert xid.strongest([Rung.NOTIFY, Rung.REBOOT, Rung.RESET_GPU]) == Rung.REBOOT
    assert xid.strongest([]) == Rung.IGNORE
