"""The job's two Kafka clients on a secured broker, from one set of ``--kafka-option`` properties.

Spark's ``kafka`` source takes the Java consumer's properties; the reader of ``{prefix}._schemas``
is librdkafka, which knows credentials and trust stores by other names
(``kafka.schema_reader_options`` translates them). The pure tests pin the translation; the broker
tests give the Java properties a Spark user writes for each secured listener (TLS, mutual TLS,
SASL/SCRAM over TLS: ``tests.support.secure_kafka``) and show the schema reader gets through with
what the job derives from them, and the whole job mirrors a table through the SCRAM listener.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from pgbridge_spark.config import MirrorConfig, parse_args
from pgbridge_spark.kafka import (
    UnsupportedKafkaOption,
    consumer_config,
    read_schema_topic,
    schema_reader_options,
)
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.postgres import wait_published
from tests.support.secure_kafka import MODES, SecureKafka

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="ann" '
              'password="p\\"w;d";')


# --- the translation (pure) -----------------------------------------------------------------------


def test_scram_credentials_and_a_pem_trust_store_become_librdkafkas_names() -> None:
    java = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
            "max.poll.records": "5000", "fetch.min.bytes": "1"}
    assert schema_reader_options(java) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ann",
        "sasl.password": 'p"w;d', "ssl.ca.location": "/etc/ca.pem"}


def test_plain_login_and_an_inline_pem_trust_store_translate_too() -> None:
    java = {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                                '  username="svc"\n  password="secret"',
            "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----\n...",
            "ssl.endpoint.identification.algorithm": ""}
    assert schema_reader_options(java) == {
        "sasl.username": "svc", "sasl.password": "secret", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\n...",
        "ssl.endpoint.identification.algorithm": "none"}


def test_pem_and_pkcs12_key_stores_give_the_client_certificate() -> None:
    pem = {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k/chain.pem", "ssl.key.password": "kp"}
    assert schema_reader_options(pem) == {"ssl.certificate.location": "/k/chain.pem",
                                          "ssl.key.location": "/k/chain.pem", "ssl.key.password": "kp"}
    pkcs12 = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k/c.p12", "ssl.keystore.password": "sp"}
    assert schema_reader_options(pkcs12) == {"ssl.keystore.location": "/k/c.p12", "ssl.keystore.password": "sp"}


@pytest.mark.parametrize(("java", "named"), [
    ({"ssl.truststore.location": "/etc/ca.jks"}, "a JKS trust store cannot be read"),
    ({"ssl.keystore.location": "/k/c.jks", "ssl.keystore.type": "JKS"}, "a JKS key store cannot be read"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     "not org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"),
])
def test_what_librdkafka_cannot_take_is_refused_naming_the_way_around(java: dict[str, str], named: str) -> None:
    with pytest.raises(UnsupportedKafkaOption) as refused:
        schema_reader_options(java)
    assert named in str(refused.value)
    assert "--schema-reader-option" in str(refused.value) and "--schema-registry-url" in str(refused.value)


def test_schema_reader_options_replace_the_translation() -> None:
    java = {"ssl.truststore.location": "/etc/ca.jks"}  # untranslatable, and not needed: replaced
    assert schema_reader_options(java, {"ssl.ca.location": "/etc/ca.pem"}) == {"ssl.ca.location": "/etc/ca.pem"}


def test_the_command_line_refuses_an_untranslatable_option_at_start_unless_a_registry_names_the_schemas(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-servers", "k:9093", "--output", "/o", "--checkpoint", "/c",
            "--kafka-option", "ssl.truststore.location=/etc/ca.jks"]
    with pytest.raises(SystemExit) as exited:
        parse_args(base)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("python -m pgbridge_spark.mirror: error: --kafka-option ssl.truststore.location: a JKS "
                            "trust store cannot be read"), error
    config, _args = parse_args([*base, "--schema-registry-url", "http://registry:8081"])
    assert config.kafka_options == {"ssl.truststore.location": "/etc/ca.jks"}
    config, _args = parse_args([*base, "--schema-reader-option", "ssl.ca.location=/etc/ca.pem"])
    assert config.reader_options() == {"ssl.ca.location": "/etc/ca.pem"}
    with pytest.raises(SystemExit):
        parse_args([*base[:6], "--kafka-option", "security.protocol"])
    assert "--kafka-option takes KEY=VALUE, not 'security.protocol'" in capsys.readouterr().err


# --- against the secured listeners --------------------------------------------------------------


def _write_schemas(bootstrap: str, topic: str, records: dict[str, str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0, "the schema records were not acknowledged within 30 s"


@pytest.mark.integration
@pytest.mark.parametrize("mode", MODES)
def test_the_schema_reader_gets_through_each_listener_with_the_java_properties(
        secure_kafka: SecureKafka, mode: str) -> None:
    prefix = f"sec{secrets.token_hex(4)}"
    schemas = {"00aa11bb22cc33dd": '{"type": "record", "name": "a", "fields": []}',
               "44ee55ff66007711": '{"type": "record", "name": "b", "fields": []}'}
    _write_schemas(secure_kafka.cluster.bootstrap, f"{prefix}._schemas", schemas)  # PLAINTEXT listener
    reader = schema_reader_options(secure_kafka.java_properties(mode))
    assert read_schema_topic(secure_kafka.bootstrap(mode), prefix, reader) == schemas
    if mode == "scram":  # the credentials really are what lets it in
        wrong = secure_kafka.java_properties(mode)
        wrong["sasl.jaas.config"] = wrong["sasl.jaas.config"].replace(secure_kafka.scram_password, "wrong")
        consumer = Consumer(consumer_config(secure_kafka.bootstrap(mode), schema_reader_options(wrong)))
        try:
            with pytest.raises(KafkaException):
                consumer.list_topics(timeout=3)
        finally:
            consumer.close()


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_job_mirrors_through_a_sasl_ssl_listener_given_only_java_properties(
        spark: Any, secure_kafka: SecureKafka, pg_dsn: str, topic_prefix: str, tmp_path: Path) -> None:
    # given: the bridge publishes (through the PLAINTEXT listener) a table's changes
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 50) g")
    env = bridge_env(pg_dsn, secure_kafka.cluster.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items"})
    with BridgeProcess(env).start() as bridge:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE items SET note = note || '!' WHERE id % 3 = 0")
            conn.execute("DELETE FROM items WHERE id % 5 = 0")
        wait_published(pg_dsn, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    # when: the job reads through the SCRAM listener with the Java properties a Spark user writes
    config = MirrorConfig(bootstrap_servers=secure_kafka.bootstrap("scram"), prefix=topic_prefix,
                          output=str(tmp_path / "mirror"), checkpoint=str(tmp_path / "checkpoint"),
                          kafka_options=secure_kafka.java_properties("scram"))
    run_available_now(MirrorJob(spark, config))
    # then
    assert_mirrored(pg_dsn, tmp_path / "mirror", "public.items")
