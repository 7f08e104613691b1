"""The demo as the README writes it: runs without DEBUG set, and no report opens on zeros."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ("utilization", "training_share", "availability", "reliability", "goodput")
REPORTS += ("remediation", "accounting")


def manage(*args: str, tmp_path, **settings) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "REDIS_URL")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}", **settings)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_documented_demo_command_runs_without_debug_or_a_secret_key_set(tmp_path):
    done = manage("demo", "--no-serve", "--nodes", "4", "--history-days", "2", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Medbay demo at http://127.0.0.1:8000/" in done.stdout
    assert "History: " in done.stdout


def test_other_commands_still_refuse_to_start_without_a_secret_key(tmp_path):
    done = manage("check", tmp_path=tmp_path)
    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr
    # Nor does the demo when someone asked for production settings.
    done = manage("demo", "--no-serve", tmp_path=tmp_path, DEBUG="false")
    assert done.returncode != 0 and "SECRET_KEY is not set" in done.stderr


@pytest.mark.django_db
def test_a_plain_demo_writes_a_default_reports_worth_of_history_so_no_report_is_all_zeros():
    from django.contrib.auth import get_user_model
    from django.test import Client

    from clusters.backends import registry

    try:
        call_command("demo", "--no-serve", "--nodes", "8", "--seed", "3")
    finally:
        registry.use(None)
    client = Client()
    client.force_login(get_user_model().objects.get(username="manager"))
    summary = {name: client.get(f"/api/v1/reports/{name}/").json()["summary"] for name in REPORTS}
    assert summary["utilization"]["allocated_gpu_h"] > 0
    assert summary["training_share"]["training_pct"] > 0
    assert summary["availability"]["installed_gpu_h"] > 0
    assert summary["reliability"]["failures"] > 0 and summary["reliability"]["node_mtbf_h"]
    assert summary["goodput"]["lost_gpu_h"] > 0
    assert summary["remediation"]["runs"] > 0
    # Slurm's accounting of the generated jobs, as import_accounting stores it.
    assert summary["accounting"]["GPU-h"] > 0 and summary["accounting"]["jobs ended"] > 0
    # What the issue saw: the default 30-day utilization table, one row a day, all 0.0.
    days = client.get("/api/v1/reports/utilization/").json()["tables"]["utilization"]["rows"]
    assert len(days) == 30
    assert all(day["allocated_gpu_h"] > 0 for day in days), days
