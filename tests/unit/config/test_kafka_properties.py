"""``kafka.properties``: librdkafka's names, an environment form a shell can set, unknown keys refused.

A dotted name cannot be a shell variable (``PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD``), so
``PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD`` must set ``sasl.password``, not a key ``sasl_password``
that librdkafka would refuse only when the producer is built; a misspelt key is refused at start with
the closest valid name.
"""

from __future__ import annotations

import re
from pathlib import Path

import confluent_kafka
import pytest

from pgbridge.config import load_settings
from pgbridge.config.librdkafka import (
    LIBRDKAFKA_PROPERTIES,
    LISTED_FROM_VERSION,
    is_librdkafka_property,
    property_name,
)
from pgbridge.errors import ConfigError

BASE = {"PGBRIDGE_POSTGRES__DSN": "postgresql://u:s3cret@db/app", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def _properties(environ: dict[str, str], config: Path | None = None) -> dict[str, str]:
    settings = load_settings(config, environ={**BASE, **environ})
    return {key: value.get_secret_value() for key, value in settings.kafka.properties.items()}


def test_the_underscore_environment_form_sets_the_dotted_librdkafka_property() -> None:
    assert _properties({"PGBRIDGE_KAFKA__PROPERTIES__SECURITY_PROTOCOL": "SASL_SSL",
                        "PGBRIDGE_KAFKA__PROPERTIES__SASL_MECHANISM": "SCRAM-SHA-512",
                        "PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD": "pw",
                        "PGBRIDGE_KAFKA__PROPERTIES__SSL_CA_LOCATION": "/ca.pem"}) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem"}


def test_the_dotted_and_json_environment_forms_still_work() -> None:
    assert _properties({"PGBRIDGE_KAFKA__PROPERTIES__SASL.USERNAME": "u",
                        "PGBRIDGE_KAFKA__PROPERTIES": '{"sasl.password": "pw", "sasl_mechanism": "PLAIN"}'}) == {
        "sasl.username": "u", "sasl.password": "pw", "sasl.mechanism": "PLAIN"}


@pytest.mark.parametrize("json_first", [True, False])
def test_the_json_form_and_the_per_key_form_combine_in_any_order(json_first: bool) -> None:
    per_key = {"PGBRIDGE_KAFKA__PROPERTIES__SASL_USERNAME": "u"}
    whole = {"PGBRIDGE_KAFKA__PROPERTIES": '{"sasl.password": "pw", "enable.idempotence": true}'}
    environ = {**whole, **per_key} if json_first else {**per_key, **whole}
    assert _properties(environ) == {"sasl.username": "u", "sasl.password": "pw", "enable.idempotence": "true"}


def test_a_property_in_both_the_json_and_the_per_key_form_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.password is set both in PGBRIDGE_KAFKA__PROPERTIES"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__PROPERTIES": '{"sasl.password": "a"}',
                               "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": "b"})


def test_the_file_secret_form_of_an_underscore_property(tmp_path: Path) -> None:
    secret = tmp_path / "sasl"
    secret.write_text("from-file\n")
    assert _properties({"PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD_FILE": str(secret)}) == {"sasl.password": "from-file"}


def test_names_with_an_underscore_of_their_own_are_kept() -> None:
    assert _properties({"PGBRIDGE_KAFKA__PROPERTIES__LOG_LEVEL": "3"}) == {"log_level": "3"}


@pytest.mark.parametrize(("variable", "closest"), [
    ("PGBRIDGE_KAFKA__PROPERTIES__SASL_PASWORD", "sasl.password"),
    ("PGBRIDGE_KAFKA__PROPERTIES__SASL.PASWORD", "sasl.password"),
    ("PGBRIDGE_KAFKA__PROPERTIES__SSL_CA_LOCATON", "ssl.ca.location"),
    ("PGBRIDGE_KAFKA__PROPERTIES__BOOTSTRAP_SERVER", "bootstrap.servers"),
])
def test_an_unknown_property_is_refused_naming_it_and_the_closest_name(variable: str, closest: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={**BASE, variable: "x"})
    message = str(caught.value)
    assert "kafka.properties" in message and variable in message, message
    assert f"did you mean {closest}?" in message, message


def test_an_unknown_property_in_the_yaml_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("kafka:\n  properties:\n    security.protocl: SSL\n")
    with pytest.raises(ConfigError, match=r"security\.protocl .*did you mean security\.protocol\?"):
        load_settings(config, environ=BASE)


def test_an_unknown_property_given_as_a_file_secret_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("x")
    with pytest.raises(ConfigError, match=r"SASL_PASWORD\) is not a librdkafka property; did you mean sasl\.password"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__PROPERTIES__SASL_PASWORD_FILE": str(secret)})


def test_two_spellings_of_one_property_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.password is set twice"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD": "a",
                               "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": "b"})


def test_no_librdkafka_property_name_is_ambiguous_in_the_environment_form() -> None:
    # every listed name the installed librdkafka has maps back to itself from its upper-case,
    # underscore spelling (a name only a newer release has is unknown here, in either spelling)
    for name in LIBRDKAFKA_PROPERTIES:
        expected = name if is_librdkafka_property(name) else None
        assert property_name(name.upper().replace(".", "_")) == expected, name


def test_the_property_list_matches_the_installed_librdkafka() -> None:
    """Every listed name exists; and every name the library's binary holds that the library accepts
    is listed (the binary's strings stand in for librdkafka's CONFIGURATION.md)."""
    assert not is_librdkafka_property("sasl.pasword")
    installed = confluent_kafka.libversion()[0]
    missing = sorted(name for name in LIBRDKAFKA_PROPERTIES if not is_librdkafka_property(name))
    if installed != LISTED_FROM_VERSION:
        # another release (the floor of test_minimum_versions): the core names exist, a handful of
        # newer ones may not, and the binary's names are not compared
        assert {"bootstrap.servers", "sasl.password", "ssl.ca.location", "transactional.id"}.isdisjoint(missing)
        assert len(missing) <= 10, f"librdkafka {installed} lacks {missing}"
        return
    assert missing == []
    libraries = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*"))
    if not libraries:
        pytest.skip("confluent-kafka without a bundled librdkafka: its names cannot be listed")
    candidates: set[str] = set()
    for text in re.findall(rb"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+", libraries[0].read_bytes()):
        parts = text.decode().split(".")
        candidates.update(".".join(parts[i:]) for i in range(len(parts) - 1))  # the linker merges suffixes
    unlisted = sorted(name for name in candidates - LIBRDKAFKA_PROPERTIES
                      if not name.startswith("topic.") and not name.endswith("_cb") and is_librdkafka_property(name))
    assert unlisted == [], f"librdkafka {confluent_kafka.libversion()[0]} has properties pgbridge does not list"
