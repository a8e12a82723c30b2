"""The command line where no server is needed: usage and configuration errors, help, ``config``,
and a refused connection's message. ``python -m pgbridge ...`` in a child process, as an operator
runs it (the commands against real servers: tests/integration/test_cli.py)."""

from __future__ import annotations

import gc
import json
import subprocess
from pathlib import Path

import yaml

from pgbridge import cli
from tests.support.cli import check, clean_env, pgbridge
from tests.support.ports import free_port

COMMANDS = ("run", "check", "schemas", "status", "config", "slot", "demo")


def _check_config(**env: str) -> subprocess.CompletedProcess[str]:
    """``pgbridge check`` with placeholder connection settings: a configuration error stops it first."""
    return check({"PGBRIDGE_POSTGRES__DSN": "x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k", **env})


def test_with_nothing_set_the_error_names_every_missing_setting_and_its_variable() -> None:
    result = pgbridge("run")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    for setting, variable in (("postgres.dsn", "PGBRIDGE_POSTGRES__DSN"),
                              ("kafka.bootstrap_servers", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS")):
        assert f"{setting} ({variable})" in result.stderr
    assert "PGBRIDGE_POSTGRES " not in result.stderr and "PGBRIDGE_POSTGRES or" not in result.stderr


def test_global_options_work_before_and_after_the_command(tmp_path: Path) -> None:
    config = tmp_path / "pgbridge.yaml"
    config.write_text("postgres:\n  dsn: postgresql://u@db/app\n  slot: from_file\nkafka:\n  bootstrap_servers: k:9092\n")
    before = pgbridge("--config", str(config), "config")
    after = pgbridge("config", "--config", str(config))
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout
    assert yaml.safe_load(before.stdout)["postgres"]["slot"] == "from_file"
    broken = tmp_path / "broken.yaml"
    broken.write_text("postgres: {dsn: x, slot: Not_Valid}\nkafka: {bootstrap_servers: k}\n")
    for args in (("--debug", "check", "--config", str(broken)), ("check", "--debug", "--config", str(broken)),
                 ("--config", str(broken), "--debug", "check")):
        result = pgbridge(*args)
        assert result.returncode == 2, args
        assert "Traceback" in result.stderr, args  # --debug took effect wherever it was written
        assert "invalid setting postgres.slot" in result.stderr, args


def test_demo_rejects_the_options_it_would_ignore(tmp_path: Path) -> None:
    config = tmp_path / "pgbridge.yaml"
    config.write_text("log: {level: DEBUG}\n")
    for args in (("demo", "--config", str(config)), ("--config", str(config), "demo")):
        result = pgbridge(*args, timeout=30)
        assert result.returncode == 2, args
        assert "--config" in result.stderr and "demo" in result.stderr, result.stderr
        assert "starting PostgreSQL" not in result.stdout


def test_help_describes_each_command_with_its_environment_and_examples() -> None:
    top = pgbridge("--help")
    assert top.returncode == 0
    for command in COMMANDS:
        assert f"    {command} " in top.stdout, command
    for text in ("PGBRIDGE_POSTGRES__DSN", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS", "PGBRIDGE_CONFIG",
                 "_FILE", "examples:", "exit status"):
        assert text in top.stdout, text
    for command in ("run", "check", "schemas", "status", "config", "demo"):
        text = pgbridge(command, "--help").stdout
        assert "examples:" in text and f"pgbridge {command}" in text.split("examples:")[1], command
    drop = pgbridge("slot", "drop", "--help").stdout
    assert "--yes" in drop and "--timeout" in drop and "examples:" in drop


def test_config_prints_the_effective_settings_with_every_secret_redacted(tmp_path: Path) -> None:
    config = tmp_path / "pgbridge.yaml"
    config.write_text("snapshot:\n  workers: 3\n  chunk_rows: 500\n")
    env = clean_env(PGBRIDGE_CONFIG=str(config),
                     PGBRIDGE_POSTGRES__DSN="postgresql://replicator:pg-secret-1@db:5432/app",
                     PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS="kafka:9092",
                     PGBRIDGE_SCHEMA_REGISTRY__URL="https://reg-user:reg-secret-2@registry:8081",
                     PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO="user:reg-secret-3",
                     PGBRIDGE_SNAPSHOT__WORKERS="4")
    result = pgbridge("config", env=env)
    assert result.returncode == 0, result.stderr
    for secret in ("pg-secret-1", "reg-secret-2", "reg-secret-3"):
        assert secret not in result.stdout + result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["postgres"]["dsn"].startswith("postgresql://replicator:") and "@db:5432/app" in shown["postgres"]["dsn"]
    assert shown["schema_registry"]["basic_auth_user_info"] == "**********"
    assert shown["snapshot"]["workers"] == 4  # the environment over the file
    assert shown["snapshot"]["chunk_rows"] == 500  # the file over the default
    assert shown["snapshot"]["mode"] == "initial"  # a default
    assert shown["kafka"]["bootstrap_servers"] == "kafka:9092"
    as_json = json.loads(pgbridge("config", "--json", env=env).stdout)
    assert as_json["snapshot"] == shown["snapshot"]


def test_connection_errors_keep_libpqs_whole_reason(tmp_path: Path) -> None:
    env = clean_env(PGBRIDGE_POSTGRES__DSN=f"postgresql://u:pw-not-shown@127.0.0.1:{free_port()}/app",
                     PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",
                     PGBRIDGE_POSTGRES__CONNECT_TIMEOUT_S="3")
    for args in (("schemas",), ("status",), ("slot", "drop", "--yes"), ("check",)):
        result = pgbridge(*args, env=env)
        output = result.stdout + result.stderr
        assert result.returncode == 1, (args, output)
        assert "Connection refused" in output, (args, output)
        assert "pw-not-shown" not in output


def test_bad_configuration_exits_2_with_one_line() -> None:
    result = check({"PGBRIDGE_POSTGRES__DSN": "x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k",
                     "PGBRIDGE_SNAPSHOT__MODE": "sometimes"})
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "snapshot.mode" in result.stderr
    result = check({}, "--config", "/nonexistent/pgbridge.yaml")
    assert result.returncode == 2
    assert "cannot read config file" in result.stderr


def test_check_names_an_unknown_skipped_operation() -> None:
    result = _check_config(PGBRIDGE_KAFKA__SKIPPED_OPERATIONS="c,insert")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "kafka.skipped_operations" in result.stderr


def test_check_names_a_route_onto_an_internal_topic() -> None:
    result = _check_config(PGBRIDGE_KAFKA__TOPIC_ROUTES=json.dumps([{"match": r"public\.(.*)", "topic": "_x.y"}]))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "kafka.topic_routes" in result.stderr and "internal to pgbridge" in result.stderr


def test_streaming_freezes_what_exists_and_collects_cycles_seventy_times_less_often() -> None:
    """``pgbridge run`` tunes the cyclic collector before the first session (cli._tune_collector)."""
    before = gc.get_threshold()
    try:
        cli._tune_collector()
        assert gc.get_threshold() == (cli.COLLECT_AFTER_ALLOCATIONS, before[1], before[2])
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
