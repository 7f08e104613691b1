import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.env import database_from_url, env_bool, env_int

ROOT = Path(__file__).resolve().parents[2]


def run_manage(*args: str, unset=(), **env) -> subprocess.CompletedProcess:
    """`manage.py ARGS` in a process of its own, without the UNSET variables, with ENV."""
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_check(**env) -> subprocess.CompletedProcess:
    return run_manage("check", unset=("SECRET_KEY", "DEBUG"), **env)


def test_debug_off_without_a_secret_key_refuses_to_start_with_a_clear_message():
    result = run_check(DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_debug_on_starts_without_a_secret_key():
    assert run_check(DEBUG="true").returncode == 0


def test_a_postgres_url_becomes_a_postgresql_database():
    config = database_from_url(
        "postgres://medbay:s%40cret@db.internal:5433/medbay?sslmode=require", Path("x")
    )
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("medbay", "medbay", "s@cret")
    assert (config["HOST"], config["PORT"]) == ("db.internal", "5433")
    assert config["OPTIONS"]["sslmode"] == "require"


def test_postgresql_connections_come_from_a_bounded_pool_per_process(monkeypatch):
    monkeypatch.delenv("DB_POOL_MAX_SIZE", raising=False)
    config = database_from_url("postgres://medbay@db/medbay", Path("x"))
    assert config["OPTIONS"]["pool"]["max_size"] == 10
    # Django refuses a pool together with persistent connections.
    assert config["CONN_MAX_AGE"] == 0
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "12")
    assert database_from_url("postgres://db/m", Path("x"))["OPTIONS"]["pool"]["max_size"] == 12


def test_a_pool_size_of_zero_keeps_one_persistent_connection_per_thread(monkeypatch):
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "0")
    monkeypatch.setenv("DB_CONN_MAX_AGE", "60")
    config = database_from_url("postgres://db/m", Path("x"))
    assert "pool" not in config["OPTIONS"]
    assert config["CONN_MAX_AGE"] == 60
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "many")
    with pytest.raises(ImproperlyConfigured, match="DB_POOL_MAX_SIZE"):
        database_from_url("postgres://db/m", Path("x"))


def test_no_url_means_sqlite_and_a_bad_scheme_is_an_error():
    assert database_from_url("", Path("/tmp/x.db"))["ENGINE"].endswith("sqlite3")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url("mysql://x/y", Path("x"))


def test_typed_readers_name_the_variable_in_their_errors(monkeypatch):
    monkeypatch.setenv("MEDBAY_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="MEDBAY_X"):
        env_bool("MEDBAY_X")
    monkeypatch.setenv("MEDBAY_X", "12")
    assert env_int("MEDBAY_X", 1) == 12


def channel_layer_with(**env) -> subprocess.CompletedProcess:
    show = "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])"
    return run_manage(
        "shell", "-c", show, unset=("CHANNEL_LAYER", "REDIS_URL"), **{"DEBUG": "true", **env}
    )


def test_the_channel_layer_is_redis_lists_unless_pubsub_is_asked_for():
    redis = "redis://127.0.0.1:6379/0"
    assert channel_layer_with(REDIS_URL=redis).stdout.strip().endswith("core.RedisChannelLayer")
    pubsub = channel_layer_with(REDIS_URL=redis, CHANNEL_LAYER="pubsub").stdout.strip()
    assert pubsub.endswith("pubsub.RedisPubSubChannelLayer")
    # Without Redis there is one process: the in-memory layer, whatever is asked.
    alone = channel_layer_with(CHANNEL_LAYER="pubsub").stdout.strip()
    assert alone.endswith("InMemoryChannelLayer")
    wrong = channel_layer_with(REDIS_URL=redis, CHANNEL_LAYER="kafka")
    assert wrong.returncode != 0 and "CHANNEL_LAYER must be one of lists, pubsub" in wrong.stderr


@pytest.mark.parametrize(
    "env, words",
    [
        ({"MEDBAY_JOB_FAULT_WINDOW_S": "0"}, "MEDBAY_JOB_FAULT_WINDOW_S must be between"),
        ({"MEDBAY_PART_FAULT_MIN_NODES": "1"}, "MEDBAY_PART_FAULT_MIN_NODES must be 2 or more"),
        ({"MEDBAY_JOB_FAULT_CAUSES": "application,gremlins"}, "unknown cause class gremlins"),
        ({"MEDBAY_TOPOLOGY_FILES": "/nonexistent/topology.conf"}, "MEDBAY_TOPOLOGY_FILES:"),
        (
            {"MEDBAY_SLURM_REASON_ACTIONS": "[hardware_problem]=rma"},
            "MEDBAY_SLURM_REASON_ACTIONS: [hardware_problem]=rma must be",
        ),
        ({"MEDBAY_SLURM_REASON_ACTIONS": "Action:Replace"}, "MEDBAY_SLURM_REASON_ACTIONS must"),
    ],
)
def test_bad_grouping_settings_stop_the_portal_naming_the_setting(env, words):
    result = run_check(DEBUG="true", **env)
    assert result.returncode != 0
    assert words in result.stderr


def test_a_topology_file_that_does_not_parse_names_its_line(tmp_path):
    broken = tmp_path / "site.parts"
    broken.write_text("Rack=r1 Nodes=gpu-[01-04]\nRack=r2\n")
    result = run_check(DEBUG="true", MEDBAY_TOPOLOGY_FILES=str(broken))
    assert result.returncode != 0
    assert f"MEDBAY_TOPOLOGY_FILES: {broken} line 2: r2 has no Nodes=" in result.stderr
