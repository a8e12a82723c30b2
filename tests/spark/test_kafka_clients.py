"""The job's two Kafka clients on a secured broker, from one set of ``--kafka-option`` properties.

Spark's ``kafka`` source takes the Java consumer's properties; the reader of ``{prefix}._schemas``
is librdkafka, which knows credentials and trust stores by other names
(``kafka.schema_reader_options`` translates them). The pure tests pin the translation; the broker
tests give the Java properties a Spark user writes for each secured listener (TLS, mutual TLS,
SASL/SCRAM over TLS: ``tests.support.secure_kafka``) and show the schema reader gets through with
what the job derives from them, JKS stores read by the driver's JVM (``java_stores``) included, and
the whole job mirrors a table through the SCRAM listener given a JKS trust store.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from pgbridge_spark.config import MirrorConfig, parse_args
from pgbridge_spark.java_stores import jvm_store_reader
from pgbridge_spark.kafka import (
    JavaStore,
    PemStore,
    UnsupportedKafkaOption,
    consumer_config,
    read_schema_topic,
    schema_reader_options,
)
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.postgres import wait_published
from tests.support.secure_kafka import MODES, OAUTH_MODES, SecureKafka

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


def test_java_stores_are_read_by_the_store_reader_and_left_out_without_one() -> None:
    read: list[tuple[JavaStore, bool]] = []

    def reader(store: JavaStore, key_store: bool) -> PemStore:
        read.append((store, key_store))
        return PemStore("CHAIN" if key_store else "CAS", "KEY" if key_store else None)

    java = {"security.protocol": "SSL", "ssl.truststore.location": "/etc/ca.jks", "ssl.truststore.password": "tp",
            "ssl.keystore.location": "/k/c.jks", "ssl.keystore.password": "sp", "ssl.key.password": "kp"}
    # Kafka's default type (JKS) when none is given; the key comes decrypted, so no key password
    assert schema_reader_options(java, read_store=reader) == {
        "security.protocol": "SSL", "ssl.ca.pem": "CAS", "ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY"}
    assert read == [(JavaStore("/etc/ca.jks", "JKS", "tp"), False), (JavaStore("/k/c.jks", "JKS", "sp", "kp"), True)]
    # a PKCS12 trust store too (librdkafka reads PKCS12 key stores only)
    assert schema_reader_options({"ssl.truststore.location": "/etc/ca.p12", "ssl.truststore.type": "pkcs12"},
                                 read_store=reader) == {"ssl.ca.pem": "CAS"}
    # the check at start, with no JVM yet: accepted, and left out
    assert schema_reader_options(java) == {"security.protocol": "SSL"}


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def test_oauthbearer_with_kafkas_token_endpoint_handler_becomes_librdkafkas_oidc_method() -> None:
    java = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
            "sasl.login.callback.handler.class": OIDC_HANDLER,
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
            "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="mirror" clientSecret="s\\"3" scope="kafka" '
                                'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";'}
    assert schema_reader_options(java) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
        "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": 's"3',
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"}
    # Kafka 4.1's properties for the client credentials, and the handler's pre-3.4 package
    java41 = {"sasl.login.callback.handler.class": OIDC_HANDLER.replace("oauthbearer.", "oauthbearer.secured."),
              "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
              "sasl.oauthbearer.client.credentials.client.id": "m",
              "sasl.oauthbearer.client.credentials.client.secret": "s", "sasl.oauthbearer.scope": "a b",
              "sasl.jaas.config": f"{OAUTH_MODULE} required ;"}
    assert schema_reader_options(java41) == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.client.id": "m", "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.scope": "a b"}


def test_oauthbearer_without_a_handler_is_the_unsecured_development_token() -> None:
    java = {"sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice" extension_k="v";'}
    assert schema_reader_options(java) == {"sasl.mechanism": "OAUTHBEARER",
                                           "enable.sasl.oauthbearer.unsecure.jwt": "true",
                                           "sasl.oauthbearer.config": "principal=alice extension_k=v"}


@pytest.mark.parametrize(("java", "named"), [
    ({"sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k/m.keytab" '
                          'principal="m@R";'}, "not com.sun.security.auth.module.Krb5LoginModule"),
    ({"sasl.jaas.config": f"{OAUTH_MODULE} required;"}, "not a login without unsecuredLoginStringClaim_sub"),
    ({"sasl.jaas.config": f'{OAUTH_MODULE} required clientId="a" clientSecret="b";',
      "sasl.login.callback.handler.class": "com.example.VaultTokenHandler"}, "not the handler com.example.Vault"),
    ({"sasl.jaas.config": f'{OAUTH_MODULE} required clientId="a" clientSecret="b";',
      "sasl.login.callback.handler.class": OIDC_HANDLER}, "not a login missing the token endpoint URL"),
    ({"sasl.jaas.config": f"{OAUTH_MODULE} required;", "sasl.login.callback.handler.class": OIDC_HANDLER,
      "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
      "sasl.oauthbearer.jwt.retriever.class": "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"},
     "not the JWT bearer grant"),
])
def test_a_login_librdkafka_cannot_take_is_refused_naming_the_way_around(java: dict[str, str], named: str) -> None:
    with pytest.raises(UnsupportedKafkaOption) as refused:
        schema_reader_options(java)
    assert named in str(refused.value), str(refused.value)
    assert "--schema-reader-option" in str(refused.value) and "--schema-registry-url" in str(refused.value)
    assert 'clientSecret="b"' not in str(refused.value) and "keyTab" not in str(refused.value)


def test_schema_reader_options_replace_the_translation() -> None:
    java = {"ssl.truststore.location": "/etc/ca.jks"}  # untranslatable, and not needed: replaced
    assert schema_reader_options(java, {"ssl.ca.location": "/etc/ca.pem"}) == {"ssl.ca.location": "/etc/ca.pem"}


def test_the_command_line_refuses_an_untranslatable_option_at_start_unless_a_registry_names_the_schemas(
        capsys: pytest.CaptureFixture[str]) -> None:
    oauth = "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    base = ["--bootstrap-servers", "k:9093", "--output", "/o", "--checkpoint", "/c", "--kafka-option", oauth]
    with pytest.raises(SystemExit) as exited:
        parse_args(base)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("python -m pgbridge_spark.mirror: error: --kafka-option sasl.jaas.config: the job's "
                            "schema reader (librdkafka) takes"), error
    config, _args = parse_args([*base, "--schema-registry-url", "http://registry:8081"])
    assert config.kafka_options == {"sasl.jaas.config": oauth.split("=", 1)[1]}
    config, _args = parse_args([*base, "--schema-reader-option", "sasl.oauthbearer.method=oidc"])
    assert config.reader_options() == {"sasl.oauthbearer.method": "oidc"}
    # a JKS trust store is accepted at start: the driver's JVM reads it when the job runs
    config, _args = parse_args([*base[:6], "--kafka-option", "ssl.truststore.location=/etc/ca.jks"])
    assert config.reader_options() == {}
    with pytest.raises(SystemExit):
        parse_args([*base[:6], "--kafka-option", "security.protocol"])
    assert "--kafka-option takes KEY=VALUE, not 'security.protocol'" in capsys.readouterr().err


# --- against the secured listeners --------------------------------------------------------------


def _write_schemas(bootstrap: str, topic: str, records: dict[str, str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0, "the schema records were not acknowledged within 30 s"


def _assert_refused(bootstrap: str, reader: dict[str, str]) -> None:
    """A schema reader with these librdkafka properties gets no metadata from ``bootstrap``."""
    consumer = Consumer(consumer_config(bootstrap, reader))
    try:
        with pytest.raises(KafkaException):
            consumer.list_topics(timeout=5)
    finally:
        consumer.close()


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
        _assert_refused(secure_kafka.bootstrap(mode), schema_reader_options(wrong))


@pytest.mark.integration
@pytest.mark.parametrize("mode", OAUTH_MODES)
def test_the_schema_reader_logs_in_with_oauthbearer_as_the_java_client_does(
        secure_kafka: SecureKafka, mode: str) -> None:
    # given: the schemas, and the OAUTHBEARER login a Java client is given for the listener
    prefix = f"oauth{secrets.token_hex(4)}"
    schemas = {"00aa11bb22cc33dd": '{"type": "record", "name": "a", "fields": []}'}
    _write_schemas(secure_kafka.cluster.bootstrap, f"{prefix}._schemas", schemas)
    issued = secure_kafka.idp.issued
    # when
    reader = schema_reader_options(secure_kafka.java_properties(mode))
    # then: the reader gets through with what the job derives
    assert read_schema_topic(secure_kafka.bootstrap(mode), prefix, reader) == schemas
    if mode == "oidc":
        # ... with a token from the identity provider, which the broker verifies: an unsecured
        # token is refused there, and so is a client whose secret is wrong
        assert secure_kafka.idp.issued > issued
        unsecured = schema_reader_options(secure_kafka.java_properties("devjwt"))
        wrong = secure_kafka.java_properties(mode)
        wrong["sasl.jaas.config"] = wrong["sasl.jaas.config"].replace(secure_kafka.idp.client_secret, "wrong")
        for refused in (unsecured, schema_reader_options(wrong)):
            _assert_refused(secure_kafka.bootstrap(mode), refused)


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.parametrize("mode", ["tls", "mtls"])
def test_the_driver_reads_jks_stores_for_the_schema_reader(spark: Any, secure_kafka: SecureKafka, mode: str,
                                                          tmp_path: Path) -> None:
    # given: the schemas, and the Java properties with JKS stores (a client key on mutual TLS)
    prefix = f"jks{secrets.token_hex(4)}"
    schemas = {"00aa11bb22cc33dd": '{"type": "record", "name": "a", "fields": []}'}
    _write_schemas(secure_kafka.cluster.bootstrap, f"{prefix}._schemas", schemas)
    java = secure_kafka.java_store_properties(mode, tmp_path)
    # when: the stores are read by the driver's JVM
    reader = schema_reader_options(java, read_store=jvm_store_reader(spark))
    # then: librdkafka gets PEM text, no file and no key password, and gets through
    assert reader["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert not any(key.endswith((".location", ".password")) for key in reader), sorted(reader)
    if mode == "mtls":
        assert reader["ssl.key.pem"].startswith("-----BEGIN PRIVATE KEY-----")
    assert read_schema_topic(secure_kafka.bootstrap(mode), prefix, reader) == schemas
    # ... and a wrong store password is one line naming the store, never the password
    wrong = {**java, "ssl.truststore.password": "not-the-password"}
    with pytest.raises(UnsupportedKafkaOption) as refused:
        schema_reader_options(wrong, read_store=jvm_store_reader(spark))
    message = str(refused.value)
    assert java["ssl.truststore.location"] in message and "password was incorrect" in message, message
    assert "not-the-password" not in message and java["ssl.truststore.password"] not in message
    # ... before the job's query starts
    config = MirrorConfig(bootstrap_servers=secure_kafka.bootstrap(mode), prefix=prefix, output=str(tmp_path / "m"),
                          checkpoint=str(tmp_path / "c"), kafka_options=wrong)
    with pytest.raises(UnsupportedKafkaOption, match="password was incorrect"):
        MirrorJob(spark, config).start()
    assert not spark.streams.active


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
    # when: the job reads through the SCRAM listener with the Java properties a Spark user writes,
    # a JKS trust store (Kafka's default type) among them
    config = MirrorConfig(bootstrap_servers=secure_kafka.bootstrap("scram"), prefix=topic_prefix,
                          output=str(tmp_path / "mirror"), checkpoint=str(tmp_path / "checkpoint"),
                          kafka_options=secure_kafka.java_store_properties("scram", tmp_path))
    run_available_now(MirrorJob(spark, config))
    # then
    assert_mirrored(pg_dsn, tmp_path / "mirror", "public.items")
