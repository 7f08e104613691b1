"""deploy/prometheus/medbay-rules.yml: valid for promtool, each alert tested firing and not."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.portal.prometheus_tools import RULE_TESTS, RULES, require_tool

pytestmark = pytest.mark.integration

ALERTS = {
    "MedbayBreakerOpen",
    "MedbayRunNeedsAttention",
    "MedbayApprovalWaiting",
    "MedbaySparePoolEmpty",
    "MedbaySyncStale",
    "MedbayControllerDown",
    "MedbayAgentsSilent",
    "MedbayDecisionsFailing",
    "MedbayLemonNode",
}


def rules() -> list[dict]:
    with open(RULES) as file:
        return [rule for group in yaml.safe_load(file)["groups"] for rule in group["rules"]]


def test_the_rules_pass_promtool_check():
    result = subprocess.run(
        [require_tool("promtool"), "check", "rules", RULES], capture_output=True, text=True
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_every_alert_has_a_runbook_and_a_summary():
    assert {rule["alert"] for rule in rules()} == ALERTS
    for rule in rules():
        assert len(rule["annotations"]["runbook"]) > 80, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_the_unit_tests_see_each_alert_fire_and_stay_quiet():
    with open(RULE_TESTS) as file:
        cases = yaml.safe_load(file)["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check["exp_alerts"]
    }
    quiet = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if not check["exp_alerts"]
    }
    assert firing == ALERTS
    assert quiet == ALERTS


def test_the_rules_pass_their_promtool_unit_tests():
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", RULE_TESTS], capture_output=True, text=True
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
