from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgbridge.cli import main
from pgbridge.config import load_settings
from pgbridge.errors import ConfigError
from pgbridge.logs import redact

BASE = {"PGBRIDGE_POSTGRES__DSN": "postgresql://u:s3cret@db/app", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def test_defaults_follow_the_contract() -> None:
    settings = load_settings(environ=BASE)
    assert settings.postgres.slot == "pgbridge"
    assert settings.postgres.publication == "pgbridge"
    assert settings.kafka.topic_prefix == "pgbridge"
    assert settings.snapshot.mode == "initial"
    assert settings.http.port == 8080
    assert settings.schema_registry.url is None
    assert "s3cret" not in repr(settings)


def test_environment_overrides_the_yaml_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("postgres:\n  dsn: host=a\n  slot: from_file\nkafka:\n  bootstrap_servers: b:1\n"
                      "  topic_prefix: file\n")
    settings = load_settings(config, environ={"PGBRIDGE_KAFKA__TOPIC_PREFIX": "env"})
    assert settings.kafka.topic_prefix == "env"
    assert settings.postgres.slot == "from_file"


def test_tables_accept_a_comma_list() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_POSTGRES__TABLES": "public.a, s.b"})
    assert settings.postgres.tables == ["public.a", "s.b"]


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"PGBRIDGE_POSTGRES__TABLES": "nodot"}, "schema.table"),
    ({"PGBRIDGE_SNAPSHOT__MODE": "sometimes"}, "snapshot.mode"),
    ({"PGBRIDGE_HTTP__PORT": "70000"}, "http.port"),
    ({"PGBRIDGE_POSTGRES__SLOT": "Bad-Slot"}, "postgres.slot"),
    ({"PGBRIDGE_BOGUS": "1"}, "PGBRIDGE_BOGUS"),
    ({"PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": ""}, "kafka.bootstrap_servers: names no broker"),
    ({"PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": " , "}, "kafka.bootstrap_servers: names no broker"),
    ({"PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "a:9092,,b:9092"}, "kafka.bootstrap_servers: has an empty entry"),
])
def test_invalid_settings_name_the_field(extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={**BASE, **extra})
    assert fragment in str(caught.value)


def test_bootstrap_servers_are_taken_without_the_spaces_around_them() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": " a:9092, b:9093 "})
    assert settings.kafka.bootstrap_servers == "a:9092,b:9093"


def test_unknown_yaml_key_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("postgres:\n  dsn: x\n  slott: typo\nkafka:\n  bootstrap_servers: b\n")
    with pytest.raises(ConfigError, match=r"postgres\.slott"):
        load_settings(config, environ={})


def test_missing_required_setting_names_the_environment_variable() -> None:
    with pytest.raises(ConfigError, match="PGBRIDGE_KAFKA"):
        load_settings(environ={"PGBRIDGE_POSTGRES__DSN": "x"})


def test_malformed_yaml_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("postgres: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(config, environ={})


def test_cli_exits_2_with_one_line_on_bad_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("PGBRIDGE_"):
            monkeypatch.delenv(key)
    config = tmp_path / "c.yaml"
    config.write_text("postgres:\n  dsn: postgresql://u:hunter2@h/d\nkafka: {}\n")
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("error: ")
    assert "hunter2" not in err


def test_cli_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "error:" in capsys.readouterr().err


def test_redaction_hides_passwords_in_dsns_and_uris() -> None:
    assert "pw" not in redact("connect host=a password=pw dbname=x")
    assert "pw" not in redact("postgresql://user:pw@host/db")
    assert "secret" not in redact("sasl.password=secret")


def test_redaction_hides_any_setting_named_for_a_secret() -> None:
    assert redact("sasl.oauthbearer.client.secret=s3cr3t") == "sasl.oauthbearer.client.secret=***"
    assert redact("--conf spark.hadoop.fs.s3a.secret.key=abc --conf x=1") == \
        "--conf spark.hadoop.fs.s3a.secret.key=*** --conf x=1"
    assert redact("no secret in this line") == "no secret in this line"


def test_secrets_can_come_from_mounted_files(tmp_path: Path) -> None:
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text("postgresql://u:from-file@db/app\n")
    sasl_file = tmp_path / "sasl"
    sasl_file.write_text("sasl-secret")
    env = {"PGBRIDGE_POSTGRES__DSN_FILE": str(dsn_file), "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092",
           "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD_FILE": str(sasl_file)}
    settings = load_settings(environ=env)
    assert settings.postgres.dsn.get_secret_value() == "postgresql://u:from-file@db/app"
    assert settings.kafka.properties["sasl.password"].get_secret_value() == "sasl-secret"
    assert "from-file" not in repr(settings) and "sasl-secret" not in repr(settings)


def test_a_secret_set_both_directly_and_from_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dsn").write_text("host=x")
    with pytest.raises(ConfigError, match="both PGBRIDGE_POSTGRES__DSN and PGBRIDGE_POSTGRES__DSN_FILE"):
        load_settings(environ={**BASE, "PGBRIDGE_POSTGRES__DSN_FILE": str(tmp_path / "dsn")})


def test_a_missing_secret_file_names_the_variable(tmp_path: Path) -> None:
    env = {"PGBRIDGE_POSTGRES__DSN_FILE": str(tmp_path / "nope"), "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}
    with pytest.raises(ConfigError, match="PGBRIDGE_POSTGRES__DSN_FILE"):
        load_settings(environ=env)


def test_ha_defaults_elect_a_leader_and_poll_every_second() -> None:
    settings = load_settings(environ=BASE)
    assert settings.ha.leader_election is True
    assert settings.ha.standby_retry_s == 1.0
    assert settings.postgres.heartbeat_interval_s == 0.0


def test_a_given_environment_is_read_without_touching_the_process_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGBRIDGE_KAFKA__TOPIC_PREFIX", "from_process")
    before = dict(os.environ)
    settings = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__TOPIC_PREFIX": "given",
                                      "PGBRIDGE_KAFKA__PROPERTIES__SASL.USERNAME": "u"})
    assert settings.kafka.topic_prefix == "given"
    assert settings.kafka.properties["sasl.username"].get_secret_value() == "u"
    assert dict(os.environ) == before
    # and the process environment is what a call without a mapping reads
    monkeypatch.setenv("PGBRIDGE_POSTGRES__DSN", "postgresql://p")
    monkeypatch.setenv("PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS", "k:9092")
    assert load_settings().kafka.topic_prefix == "from_process"
